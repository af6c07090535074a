// The console: REST for commands, the session websocket for everything that happened.
// The websocket replays from `after=<last seq>` on reconnect, so nothing durable is missed.
// Approval cards match the viewer: an approver answers on the card; anyone else sees who will.
// The controls follow the server's access rule (skald/sessions/access.py), which the page states in
// its data attributes: Send shows only on a session the viewer may write to (their own, with a role
// that converses), Stop on one they may stop (their own, or any for an operator).
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
  // endedSeq: the seq of the last exchange_settled shown. A request's answer (202 to a message, 200 to
  // a stop) can arrive after the exchange it started or stopped has already ended on the socket; the
  // status line then keeps "Exchange ended", never goes back to "working" or "Stop requested".
  let session = null, socket = null, lastSeq = 0, endedSeq = 0, userSeq = 0;
  const cards = new Map();  // request_id → card element
  const known = new Map();  // session id → the session as the API last answered it (owner, case, badge)
  const strip = window.SkaldTaskStrip.create($("tasks"), {source: "web", api, onOpen: (id) => open(id)});

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

  function approvalCard(event) {
    const p = event.payload, card = el("div", "card waiting");
    card.dataset.requestId = p.request_id || "";
    card.appendChild(el("h4", "", `Approval needed: ${p.tool || p.name} (${p.key})`));
    if (p.handoff) card.appendChild(el("div", "", `Question for a human: ${p.question}`));
    else card.appendChild(diff(p.preview));
    if (canResolve && p.request_id && p.requested_by_id === myId) {  // say it before anyone decides
      card.appendChild(el("div", "own", fourEyes
        ? "You started this session: another approver must decide (four eyes)."
        : "You started this session: you are deciding on your own agent's call (four eyes is off)."));
    }
    if (canResolve && p.request_id) {
      const actions = el("div", "actions"), reason = el("input");
      reason.placeholder = "reason (required to reject)";
      actions.appendChild(reason);
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
          socket.send(JSON.stringify({type: "approval.resolve", request_id: p.request_id, decision, reason: reason.value}));
        };
        actions.appendChild(b);
      }
      card.appendChild(actions);
    }
    card.appendChild(el("div", "state", canResolve ? "" : "Waiting for an approver."));
    card.appendChild(el("div", "error"));
    if (p.request_id) cards.set(p.request_id, card);
    return card;
  }

  function resolved(p) {
    const card = cards.get(p.request_id);
    if (!card) return;
    const by = p.by ? ` by ${p.by}` : "", why = p.reason ? ` — “${p.reason}”` : "";
    const cls = p.status === "approved" ? "resolved" : p.status === "cancelled" ? "cancelled" : "rejected";
    setState(card, cls, `${p.status}${by}${why}`);
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

  // A request's answer, unless the socket already showed the exchange end it led to (a row after
  // ``mark``, the last seq seen when the request was sent).
  function pending(text, mark) {
    if (endedSeq <= mark) $("status").textContent = text;
  }

  function show(event) {
    if (event.seq) lastSeq = Math.max(lastSeq, event.seq);
    if (event.kind === "user") userSeq = Math.max(userSeq, event.seq || 0);
    const p = event.payload || {};
    if (event.type === "task.update") { strip.update(p); return; }  // the task strip, not the log
    if (event.type === "turn.delta") {  // the reply as it streams: its newest lines in view
      const live = $("live");
      live.textContent += event.text || "";
      live.scrollTop = live.scrollHeight;
      return;
    }
    if (event.type === "approval.accepted") {
      const card = cards.get(event.request_id);
      if (card) card.querySelector(".state").textContent = `Sent: ${event.status}. The run continues.`;
      if (!following()) load();  // the session's "approval waiting" badge (the live socket says so when joined)
      return;
    }
    if (event.type === "stop.accepted") { pending("Stop requested.", userSeq); return; }  // unless it ended already
    if (event.type === "error") {
      const card = event.request_id && cards.get(event.request_id);
      if (card) {
        card.querySelector(".error").textContent = `${event.message} (${event.code})`;
        card.querySelectorAll(".actions button").forEach((x) => { x.disabled = false; });
      } else $("status").textContent = `${event.code}: ${event.message}`;
      return;
    }
    if (event.kind === "control:approval_resolved") resolved(p);
    // This session's badge changes: re-read the list (an operator's live socket does not carry approvals).
    if (["control:approval_requested", "control:approval_resolved", "canceled"].includes(event.kind)) reloadSoon();
    if (event.kind === "canceled") {
      cards.forEach((card) => { if (card.classList.contains("waiting")) setState(card, "cancelled", "Cancelled: the exchange was stopped."); });
    }
    if (event.kind && event.kind.startsWith("control:") && !["control:approval_requested", "control:approval_resolved", "control:exchange_settled", "control:handoff",
      "control:compaction_probe", "control:compaction_quota"].includes(event.kind)) return;
    const li = el("li", `ev ev-${(event.kind || event.type || "event").replace(/[^a-z0-9_-]+/gi, "-")}`);
    if (event.narrative) {  // a delegate's own turns, shown nested under the call that opened it
      li.classList.add("nested");
      li.appendChild(el("span", "frame", event.narrative.split(":").slice(0, 2).join(":")));
    }
    li.appendChild(el("span", "kind", event.kind || event.type));
    if (event.kind === "user") li.appendChild(el("span", "user", p.content));
    else if (event.kind === "assistant") {
      $("live").textContent = "";
      const said = [p.content || "", ...(p.tool_calls || []).map((c) => `→ ${callText(c)}`)].filter(Boolean);
      li.appendChild(el("span", "assistant", said.join("\n")));
    } else if (event.kind === "tool_result") li.appendChild(el("span", "tool", `[${p.status}] ${p.name}: ${p.content}`));
    else if (event.kind === "control:approval_requested") li.appendChild(approvalCard(event));
    else if (event.kind === "control:approval_resolved") li.appendChild(el("span", "tool", `${p.status} by ${p.by || "?"}${p.reason ? ` — “${p.reason}”` : ""}`));
    else if (event.kind === "control:exchange_settled") {
      li.appendChild(el("span", "tool", `exchange ended: ${p.outcome}`));
      $("status").textContent = `Exchange ended: ${p.outcome}`;
      endedSeq = Math.max(endedSeq, event.seq || 0);
    }
    else if (event.kind === "subagent_result") li.appendChild(el("span", "tool", `[${p.outcome}] ${p.agent}: ${p.content}`));
    else if (event.type === "compaction" || event.type === "compaction.probe" || event.type === "compaction.quota") {
      li.classList.add("compaction"); li.appendChild(compactionMarker(event));
    }
    else li.appendChild(el("span", "tool", JSON.stringify(p)));
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
      if (e.code >= 4400 && e.code < 4500) { $("status").textContent = `This session cannot be opened (${e.code}).`; return; }
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
    session = id; lastSeq = 0; endedSeq = 0; userSeq = 0; cards.clear(); $("events").innerHTML = ""; $("live").textContent = "";
    $("status").textContent = `Session #${id}`;
    strip.load();
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
    if (r.status === 202) pending("Sent; the agent is working.", mark); else $("status").textContent = problem(r.body, r.status);
    if (r.status === 202) $("message").value = "";
  };
  if ($("stop")) $("stop").onclick = async () => {
    if (!session) return;
    const mark = lastSeq;
    const r = await api(`/api/sessions/${session}/stop/`, {method: "POST"});
    if (r.ok) pending("Stop requested.", mark); else $("status").textContent = problem(r.body, r.status);
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
