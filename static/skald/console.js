// The console: REST for commands, the session websocket for everything that happened.
// The websocket replays from `after=<last seq>` on reconnect, so nothing durable is missed.
// Approval cards match the viewer: an approver answers on the card; anyone else sees who will.
// The controls follow the server's access rule (skald/sessions/access.py), which the page states in
// its data attributes: Send shows only on a session the viewer may write to (their own, with a role
// that converses), Stop on one they may stop (their own, or any for an operator).
// The status line says what the open session is doing now ("Waiting for an approver", "Stopped",
// "Done"), derived from the events the socket replays and then streams; the log speaks in words,
// never in the kernel's labels (control:*, user:3, a payload as JSON).
(function () {
  "use strict";
  const csrf = () => (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";
  const api = (path, options = {}) => fetch(path, {
    credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-CSRFToken": csrf(), ...(options.headers || {})},
    ...options,
  }).then(async (r) => ({status: r.status, ok: r.ok, body: await r.json().catch(() => ({}))}));
  const $ = (id) => document.getElementById(id);
  const canResolve = document.body.dataset.canResolve === "1";
  const myId = Number(document.body.dataset.userId), fourEyes = document.body.dataset.fourEyes === "1";
  const canConverse = document.body.dataset.canConverse === "1", canStopAny = document.body.dataset.canStopAny === "1";
  // statusSeq: the seq of the newest event that set the status line. A request's answer (202 to a
  // message, 200 to a stop) can arrive after the events it led to (the exchange already parked, or
  // ended); the status line then keeps what those said, never goes back to "working" or "Stopping".
  let session = null, socket = null, lastSeq = 0, statusSeq = 0, userSeq = 0;
  // The reply streaming in #live is a draft until its row arrives. Deltas of an exchange that ended
  // (or that the viewer stopped) are dropped: a stop never leaves half a message behind.
  const ended = new Set();  // exchange ids
  let discarded = false;  // a draft was cleared by a stop: the "Stopped" row says so
  const cards = new Map();  // request_id → card element
  // A sub-agent's answer reads once (issue 35): the child's own last line says it; the delegating
  // call's result row and the subagent_result row then point at it instead of repeating it.
  const resultRows = new Map();  // "<narrative>|<call key>" → the tool_result row's text element
  let childAnswer = "";
  const known = new Map();  // session id → the session as the API last answered it (owner, case, badge)
  const strip = window.SkaldTaskStrip.create($("tasks"), {source: "web", api, onOpen: (id) => open(id)});
  // An MCP server's questions to the session's owner (static/skald/elicitation.js).
  const asked = window.SkaldElicitation.create({api, append: (li) => append(li), myId});

  function el(tag, cls, value) {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (value !== undefined) n.textContent = value;
    return n;
  }
  function problem(body, status) { return body && body.message ? `${body.code}: ${body.message}` : `HTTP ${status}`; }

  // Keep the newest line in view, unless the reader scrolled up to read.
  function append(node) {
    const box = $("events"), atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    box.appendChild(node);
    if (atEnd) box.scrollTop = box.scrollHeight;
  }

  function diff(preview) {
    const pre = el("pre");
    for (const line of (preview || "").split("\n")) {
      const header = line.startsWith("+++") || line.startsWith("---");
      pre.appendChild(el("span", header ? "" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "", line || " "));
    }
    return pre;
  }

  function setState(card, cls, text) {
    card.classList.remove("waiting");
    if (cls) card.classList.add(cls);
    card.querySelector(".state").textContent = text;
    card.querySelector(".error").textContent = "";  // a refused earlier try no longer applies
    const actions = card.querySelector(".actions");
    if (actions) actions.remove();
  }

  // Injection provenance (issue 30, docs/provenance.md): "follows untrusted content", the source
  // (tool, server, event), the suspect spans and each argument taken from untrusted content.
  function provenanceBanner(prov) {
    const box = el("div", "provenance", "");
    box.appendChild(el("strong", "", "Follows untrusted content."));
    for (const s of prov.sources || []) {
      const when = s.at ? `, ${new Date(s.at).toLocaleString()}` : "";
      const line = el("div", "source", `From ${s.tool}${s.server ? ` (MCP server ${s.server})` : ""}${when}, event #${s.seq}.`);
      line.dataset.seq = s.seq;
      for (const f of s.suspects || []) {
        const m = el("div", "suspect", `Suspected injection (${f.kind}, score ${f.score}): `);
        m.appendChild(el("mark", "", f.excerpt || ""));
        line.appendChild(m);
      }
      box.appendChild(line);
    }
    for (const a of prov.arguments || []) {
      const line = el("div", "argument", `⚠ argument ${a.path} = ${a.value} came from ${a.tool} (event #${a.seq}, ${a.how})${a.suspect ? ", a result with a suspected injection" : ""}`);
      line.dataset.path = a.path;
      box.appendChild(line);
    }
    return box;
  }

  function approvalCard(event) {
    const p = event.payload, card = el("div", "card waiting");
    card.dataset.requestId = p.request_id || "";
    card.dataset.toolCallId = p.tool_call_id || "";
    if (p.handoff) card.dataset.handoff = "1";
    card.appendChild(el("h4", "", `Approval needed: ${p.tool || p.name} (${p.key})`));
    if (p.handoff) card.appendChild(el("div", "", `Question for a human: ${p.question}`));
    else {
      if (p.provenance && p.provenance.tainted) card.appendChild(provenanceBanner(p.provenance));
      card.appendChild(diff(p.preview));
    }
    if (canResolve && p.request_id && p.requested_by_id === myId) {  // say it before anyone decides
      card.appendChild(el("div", "own", fourEyes
        ? "You started this session: another approver must decide (four eyes)."
        : "You started this session: you are deciding on your own agent's call (four eyes is off)."));
    }
    if (canResolve && p.request_id) {
      const actions = el("div", "actions"), reason = el("input"), ack = el("input");
      reason.placeholder = "reason (required to reject)";
      actions.appendChild(reason);
      ack.type = "checkbox";
      if (p.provenance && p.provenance.acknowledge_required) {  // the server refuses an approval without it
        const label = el("label", "acknowledge", " I have read the provenance");
        label.prepend(ack);
        actions.appendChild(label);
      }
      for (const decision of ["approve", "reject"]) {
        const b = el("button", decision, decision === "approve" ? "Approve" : "Reject");
        b.onclick = () => {
          card.querySelector(".error").textContent = "";
          if (decision === "reject" && !reason.value.trim()) {  // the server refuses it too (reason_required)
            card.querySelector(".error").textContent = "A reason is required to reject.";
            reason.focus();
            return;
          }
          if (!socket || socket.readyState !== WebSocket.OPEN) { card.querySelector(".error").textContent = "Not connected; retrying…"; return; }
          actions.querySelectorAll("button").forEach((x) => { x.disabled = true; });
          socket.send(JSON.stringify({type: "approval.resolve", request_id: p.request_id, decision, reason: reason.value,
                                      provenance_acknowledged: ack.checked}));
        };
        actions.appendChild(b);
      }
      card.appendChild(actions);
    }
    card.appendChild(el("div", "state", canResolve ? "" : "Waiting for an approver."));
    card.appendChild(el("div", "error"));
    return card;
  }

  // An answered approval as a sentence with the approver's name ("Approved by carol — “fine”"); the
  // server sends the name beside the principal label (by_name beside by: "user:3").
  const ANSWERS = {approved: "Approved", rejected: "Rejected", cancelled: "Cancelled", expired: "Expired"};
  function answerText(p) {
    const why = p.reason ? ` — “${p.reason}”` : "";
    if (p.status === "expired") return `Expired: nobody answered in time${why}`;
    const who = p.by_name || p.by;
    return `${ANSWERS[p.status] || String(p.status || "Answered").replace(/_/g, " ")}${who ? ` by ${who}` : ""}${why}`;
  }

  function resolved(p) {
    const card = cards.get(p.request_id);
    if (!card) return;
    const cls = p.status === "approved" ? "resolved" : p.status === "cancelled" ? "cancelled" : "rejected";
    setState(card, cls, answerText(p));
  }

  // A handoff's answer (skald.cases.runs): the card of its call says what the human decided.
  function handoffText(p) {
    const note = p.note ? ` — “${p.note}”` : "";
    return p.decision === "close" ? `A human closed the run${note}` : `A human answered; the agent continues${note}`;
  }
  function handedBack(p) {
    cards.forEach((card) => {
      if (card.classList.contains("waiting") && Number(card.dataset.toolCallId) === p.tool_call_id) {
        setState(card, p.decision === "close" ? "cancelled" : "resolved", handoffText(p));
      }
    });
  }

  // The labels above the log's rows: the kernel's journal kinds as words.
  const LABELS = {
    "control:approval_requested": "Approval requested", "control:approval_resolved": "Approval answered",
    "control:exchange_settled": "Exchange ended", "control:handoff": "Handoff answered",
    "control:compaction_probe": "Compaction probe", "control:compaction_quota": "Compaction limit",
    "canceled": "Stop",
  };
  function label(kind) {
    if (LABELS[kind]) return LABELS[kind];
    if (!kind.startsWith("control:")) return kind;
    const words = kind.slice("control:".length).replace(/_/g, " ");
    return words.charAt(0).toUpperCase() + words.slice(1);
  }
  // A payload no row above knows, as "key: value" lines rather than JSON.
  function payloadText(p) {
    return Object.entries(p).map(([key, value]) =>
      `${key.replace(/_/g, " ")}: ${typeof value === "string" ? value : JSON.stringify(value)}`).join("\n");
  }

  // A compaction is shown inline where it happened: what it covered, its summary, then its probe score.
  function compactionMarker(event) {
    const p = event.payload || {};
    const box = el("div", "compaction-marker");
    if (event.kind === "compaction") {
      const m = p.manifest || {};
      box.appendChild(el("strong", "", `Compacted seq ${m.first_seq}–${m.last_seq} (${m.count} rows, ${m.covered_tokens} tokens); verbatim from seq ${m.tail_first_seq}`));
      const details = el("details");
      details.appendChild(el("summary", "", "summary"));
      details.appendChild(el("pre", "", p.summary));
      box.appendChild(details);
    } else if (event.kind === "control:compaction_probe") {
      box.appendChild(el("span", "probe", `probe: ${p.lost_permille}‰ lost (${p.result}; ${p.post_hits} of ${p.pre_hits} kept)`));
      if (p.latched) box.appendChild(el("span", "latch", " — latched: no further compaction this episode"));
    } else {
      box.appendChild(el("strong", "latch", `stopped: compaction quota reached (${p.compactions} of ${p.max_per_episode})`));
    }
    return box;
  }

  // The status line: the open session and what it is doing now.
  function say(text) {
    $("status").textContent = session ? `Session #${session}${text ? ` · ${text}` : ""}` : text;
  }
  // The status an event leaves (``seq`` then counts as the newest said).
  function sayAt(text, seq) {
    statusSeq = Math.max(statusSeq, seq || 0);
    say(text);
  }
  // A request's answer, unless the socket already showed where it led (a row after ``mark``, the
  // last seq seen when the request was sent).
  function pending(text, mark) {
    if (statusSeq <= mark) say(text);
  }

  const OUTCOMES = {
    completed: "Done", canceled: "Stopped", turn_cap_reached: "Ended: the agent reached its turn limit",
    budget_exceeded: "Ended: the token budget ran out", provider_failed: "Failed: the model provider did not answer",
  };
  function waitingFor() {  // the calls still waiting on a card: an approver's answer, or a human's
    const open = [...cards.values()].filter((card) => card.classList.contains("waiting"));
    if (open.some((card) => !card.dataset.handoff)) return "Waiting for an approver";
    return open.length ? "Waiting for a human" : "";
  }

  // What the session is doing after ``event``, for the status line ("" when it changes nothing).
  function statusAfter(event) {
    const p = event.payload || {};
    switch (event.kind) {
      case "control:approval_requested": return waitingFor() || "Waiting for an approver";
      case "control:approval_resolved":  // a cancelled one belongs to a stop, which says "Stopped" itself
        return p.status === "cancelled" ? "" : waitingFor() || `${answerText(p)}; the agent continues`;
      case "control:handoff": return waitingFor() || (p.decision === "close" ? "Closed by a human" : "A human answered; the agent continues");
      case "control:exchange_parked": return waitingFor() || (p.question ? "Waiting for a human" : "Waiting for an approver");
      case "canceled": return p.cause === "withdrawn" ? "Stopped: the task was cancelled" : "Stopped";
      case "control:exchange_settled": return OUTCOMES[p.outcome] || `Ended: ${String(p.outcome).replace(/_/g, " ")}`;
      case "user": case "assistant": case "tool_result": case "subagent_result": case "control:tool_intent":
      case "control:tool_done": case "control:frame_opened": case "control:frame_closed":
        return waitingFor() || "The agent is working";
      default: return "";
    }
  }

  // An MCP server asked the owner something: its card in the log; the status line says so while it waits.
  function elicitationShown(event) {
    asked.show(event);
    if (event.status === "pending") say(`${event.tool} is waiting for an answer`);
    else if (!asked.waiting()) say("The agent is working");
  }

  // The draft goes (a stop, or its exchange ended without a row for it).
  function dropDraft() {
    if ($("live").textContent) discarded = true;
    $("live").textContent = "";
  }

  function show(event) {
    if (event.seq) lastSeq = Math.max(lastSeq, event.seq);
    if (event.kind === "user") userSeq = Math.max(userSeq, event.seq || 0);
    const p = event.payload || {};
    if (event.type === "task.update") { strip.update(p); return; }  // the task strip, not the log
    if (event.type === "turn.delta") {  // the reply as it streams: its newest lines in view
      if (ended.has(event.exchange)) return;  // late words of an exchange that ended or was stopped
      const live = $("live");
      live.textContent += event.text || "";
      live.scrollTop = live.scrollHeight;
      return;
    }
    if (event.type === "mcp.elicitation") { elicitationShown(event); return; }
    if (event.type === "task.progress") { const text = strip.progress(event); if (text) say(text); return; }
    if (event.type === "tool.progress") {  // an MCP call's notifications/progress: the status line only
      if (ended.has(event.exchange)) return;
      const of = event.total ? ` of ${event.total}` : "";
      say(`${event.tool}: ${event.progress}${of}${event.message ? ` — ${event.message}` : ""}`);
      return;
    }
    if (event.type === "approval.accepted") {
      const card = cards.get(event.request_id);
      if (card) card.querySelector(".state").textContent = `Sent: ${event.status}. The run continues.`;
      if (!following()) load();  // the session's "approval waiting" badge (the live socket says so when joined)
      return;
    }
    if (event.type === "stop.accepted") { pending("Stopping…", userSeq); return; }  // unless it ended already
    if (event.type === "error") {
      const card = event.request_id && cards.get(event.request_id);
      if (card) {
        card.querySelector(".error").textContent = `${event.message} (${event.code})`;
        card.querySelectorAll(".actions button").forEach((x) => { x.disabled = false; });
      } else say(`${event.code}: ${event.message}`);
      return;
    }
    if (event.kind === "control:approval_resolved") resolved(p);
    if (event.kind === "control:handoff") handedBack(p);
    if (event.kind === "canceled" || event.kind === "control:exchange_settled") {
      if (event.exchange) ended.add(event.exchange);
      dropDraft();
    }
    // This session's badge changes: re-read the list (an operator's live socket does not carry approvals).
    if (["control:approval_requested", "control:approval_resolved", "canceled"].includes(event.kind)) reloadSoon();
    if (event.kind === "canceled") {  // a cancelled async task withdraws its cards (the row's cause says so)
      const text = p.cause === "withdrawn" ? "Withdrawn: the task was cancelled." : "Cancelled: the exchange was stopped.";
      cards.forEach((card) => { if (card.classList.contains("waiting")) setState(card, "cancelled", text); });
    }
    if (event.kind === "control:approval_requested") cards.set(p.request_id || `call:${p.tool_call_id}`, approvalCard(event));
    const now = event.kind && statusAfter(event);
    if (now) sayAt(now, event.seq);
    if (event.kind && event.kind.startsWith("control:") && !["control:approval_requested", "control:approval_resolved", "control:exchange_settled", "control:handoff",
      "control:compaction_probe", "control:compaction_quota"].includes(event.kind)) return;
    const li = el("li", `ev ev-${(event.kind || event.type || "event").replace(/[^a-z0-9_-]+/gi, "-")}`);
    if (event.narrative) {  // a delegate's own turns, shown nested under the call that opened it
      li.classList.add("nested");
      li.appendChild(el("span", "frame", event.narrative.split(":").slice(0, 2).join(":")));
    }
    li.appendChild(el("span", "kind", label(event.kind || event.type)));
    if (event.kind === "user") li.appendChild(el("span", "user", p.content));
    else if (event.kind === "assistant") {
      $("live").textContent = "";
      const said = [p.content || "", ...(p.tool_calls || []).map((c) => `→ ${callText(c)}`)].filter(Boolean);
      li.appendChild(el("span", "assistant", said.join("\n")));
      if (event.narrative && p.content) childAnswer = String(p.content).trim();
    } else if (event.kind === "tool_result") {
      const row = el("span", "tool", `[${p.status}] ${p.name}: ${p.content}`);
      resultRows.set(`${event.narrative || ""}|${p.key}`, row);
      li.appendChild(row);
    }
    else if (event.kind === "control:approval_requested") li.appendChild(cards.get(p.request_id || `call:${p.tool_call_id}`));
    else if (event.kind === "control:approval_resolved") li.appendChild(el("span", "tool", answerText(p)));
    else if (event.kind === "control:handoff") li.appendChild(el("span", "tool", handoffText(p)));
    else if (event.kind === "canceled") {
      li.appendChild(el("span", "tool", `Stopped: ${p.reason || "stop requested"}.${discarded ? " The unfinished reply was discarded." : ""}`));
      discarded = false;
    }
    else if (event.kind === "control:exchange_settled") li.appendChild(el("span", "tool", `exchange ended: ${String(p.outcome).replace(/_/g, " ")}`));
    else if (event.kind === "subagent_result") {
      const same = String(p.content || "").trim() === childAnswer;
      const call = resultRows.get(`${event.narrative || ""}|${p.key}`);
      if (same && call) call.textContent = call.textContent.split(":")[0] + `: ${p.agent}'s answer, above`;
      li.appendChild(el("span", "tool", same ? `[${p.outcome}] ${p.agent} returned its answer (above)`
                                             : `[${p.outcome}] ${p.agent}: ${p.content}`));
    }
    else if (event.type === "compaction" || event.type === "compaction.probe" || event.type === "compaction.quota") {
      li.classList.add("compaction"); li.appendChild(compactionMarker(event));
    }
    else li.appendChild(el("span", "tool", payloadText(p)));
    append(li);
  }

  function connect() {
    if (socket) { socket.onclose = null; socket.close(); }
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const current = session;
    socket = new WebSocket(`${scheme}://${location.host}/ws/sessions/${current}/?after=${lastSeq}`);
    socket.onmessage = (m) => show(JSON.parse(m.data));
    socket.onclose = (e) => {
      if (session !== current) return;
      if (e.code >= 4400 && e.code < 4500) { say(`This session cannot be opened (${e.code}).`); return; }
      setTimeout(() => session === current && connect(), 1000);
    };
  }

  // A tool call as the model asked for it. Arguments with a multi-line text (a file to write, a
  // report) read as that text, one argument per line, instead of one JSON line full of "\n".
  function callText(c) {
    let args = null;
    try { args = JSON.parse(c.arguments); } catch { /* shown as sent */ }
    const multiline = (v) => typeof v === "string" && v.includes("\n");
    if (!args || typeof args !== "object" || Array.isArray(args) || !Object.values(args).some(multiline)) {
      return `${c.name}(${c.arguments})`;
    }
    const lines = Object.entries(args).map(([key, value]) =>
      multiline(value) ? `  ${key}:\n${value.replace(/^/gm, "    ")}` : `  ${key}: ${JSON.stringify(value)}`);
    return `${c.name}(\n${lines.join("\n")}\n)`;
  }

  // What the viewer may do in the open session: Send on their own, Stop where the server allows it;
  // a warning above the message box when the session has no case (read_logs then fails with no_case).
  function controls(s) {
    const writable = canConverse && s.owner === myId;
    for (const node of [$("message"), document.querySelector("#composer button[type=submit]")]) {
      if (node) node.hidden = !writable;
    }
    if ($("stop")) $("stop").hidden = !((canConverse && s.owner === myId) || canStopAny);
    $("not-yours").hidden = writable || !canConverse;  // a reader without the role has the sidebar's sentence
    $("no-case").hidden = !writable || s.case !== null;
  }

  async function open(id) {
    session = id; lastSeq = 0; statusSeq = 0; userSeq = 0; cards.clear(); ended.clear(); resultRows.clear(); childAnswer = ""; discarded = false;
    $("events").innerHTML = ""; $("live").textContent = "";
    say("");  // "Session #N", until its events say what it is doing
    strip.load();
    asked.clear(); asked.load(id);
    document.querySelectorAll("#sessions li").forEach((li) => li.classList.toggle("current", li.dataset.id == id));
    connect();
    if (!known.has(id)) {  // a task's session, not in the list yet
      const r = await api(`/api/sessions/${id}/`);
      if (r.ok) known.set(id, r.body);
    }
    if (session === id && known.has(id)) controls(known.get(id));
  }

  let reloading = 0;  // a list reload asked for by the open session's events, once for a burst of them
  function reloadSoon() {
    clearTimeout(reloading);
    reloading = setTimeout(load, 300);
  }

  let listed = "";  // what the session list shows now, to leave it alone when nothing changed
  let loading = 0;  // the newest load; an older one still awaiting its answers must not apply them
  async function load() {
    if (document.hidden) return;  // a background tab does not poll; it loads again when shown
    const ticket = ++loading;
    const {status, ok, body} = await api("/api/sessions/");
    if (ticket !== loading) return;
    if (!ok || !Array.isArray(body)) {
      listed = ""; $("sessions").replaceChildren();
      $("sessions-note").textContent = `Sessions unavailable: ${problem(body, status)}`;
      return;
    }
    body.forEach((s) => known.set(s.id, s));
    if (known.has(session)) controls(known.get(session));
    $("sessions-note").textContent = body.length ? "" : "No session yet.";
    // Built aside and swapped in at once, and only when it changed: the list never flickers empty
    // while the answers are awaited, and an item under the pointer stays the same element.
    const shown = JSON.stringify(body.map((s) => [s.id, s.title || s.agent, s.awaiting_approval]));
    if (shown === listed) return;
    listed = shown;
    const items = body.map((s) => {
      const li = el("li", s.id === session ? "current" : "", `#${s.id} ${s.title || s.agent}`);
      li.dataset.id = s.id;
      // An approver is the one it waits for; anyone else waits for an approver.
      if (s.awaiting_approval) li.appendChild(el("span", "badge", canResolve ? "approval waiting" : "waiting for an approver"));
      li.onclick = () => open(s.id);
      return li;
    });
    $("sessions").replaceChildren(...items);
  }

  if ($("new-session")) $("new-session").onclick = async () => {
    const picked = $("new-case") && $("new-case").value;
    const r = await api("/api/sessions/", {method: "POST", body: JSON.stringify(picked ? {case: Number(picked)} : {})});
    if (!r.ok) { $("sessions-note").textContent = problem(r.body, r.status); return; }
    known.set(r.body.id, r.body);
    open(r.body.id);  // first: the composer sends to it at once
    load();
  };
  if ($("composer")) $("composer").onsubmit = async (e) => {
    e.preventDefault(); if (!session || !$("message")) return;
    const mark = lastSeq;
    const r = await api(`/api/sessions/${session}/messages/`, {method: "POST", body: JSON.stringify({content: $("message").value})});
    if (r.status === 202) pending("Sent; the agent is working", mark); else say(problem(r.body, r.status));
    if (r.status === 202) $("message").value = "";
  };
  if ($("stop")) $("stop").onclick = async () => {
    if (!session) return;
    const mark = lastSeq, id = session;
    const r = await api(`/api/sessions/${session}/stop/`, {method: "POST"});
    if (!r.ok) { say(problem(r.body, r.status)); return; }
    if (!r.body || !r.body.id) { pending("Nothing was running", mark); return; }
    // The draft goes at once, and the words still on their way are dropped: a stopped reply is not
    // left half written. The socket's "canceled" row then says it was stopped.
    if (session === id) { ended.add(r.body.id); dropDraft(); }
    pending("Stopping…", mark);
  };
  // The list follows the admin live socket (static/skald/live.js): a session created or an approval
  // parked or answered anywhere announces its topic once committed, and the list re-reads what this
  // viewer may see; the socket's (re)join re-reads it too. A viewer the socket refuses polls instead.
  const aside = document.querySelector("aside");
  const following = () => aside.classList.contains("live-connected");
  load();
  window.SkaldLive.listen([{node: aside, topics: ["sessions", "approvals"], refresh: load}]);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) load(); });
})();
