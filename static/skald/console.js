// The console: REST for commands, the session websocket for everything that happened.
// The websocket replays from `after=<last seq>` on reconnect, so nothing durable is missed.
(function () {
  const csrf = () => (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";
  const api = (path, options = {}) => fetch(path, {
    credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-CSRFToken": csrf(), ...(options.headers || {})},
    ...options,
  }).then(async (r) => ({status: r.status, body: await r.json().catch(() => ({}))}));
  const $ = (id) => document.getElementById(id);
  let session = null, socket = null, lastSeq = 0;

  function text(node, value) { node.textContent = value; return node; }
  function el(tag, cls, value) { const n = document.createElement(tag); if (cls) n.className = cls; if (value !== undefined) text(n, value); return n; }

  function diff(preview) {
    const pre = el("pre");
    for (const line of (preview || "").split("\n")) {
      const header = line.startsWith("+++") || line.startsWith("---");
      const span = el("span", header ? "" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "", line + "\n");
      pre.appendChild(span);
    }
    return pre;
  }

  function approvalCard(event) {
    const p = event.payload, card = el("div", "card");
    card.appendChild(el("div", "", `Approval needed: ${p.tool || p.name} (${p.key})`));
    if (p.handoff) { card.appendChild(el("div", "", `Question for a human: ${p.question}`)); return card; }
    card.appendChild(diff(p.preview));
    const reason = el("input"); reason.placeholder = "reason"; card.appendChild(reason);
    for (const decision of ["approve", "reject"]) {
      const b = el("button", "", decision);
      b.onclick = () => socket && socket.send(JSON.stringify({type: "approval.resolve", request_id: p.request_id, decision, reason: reason.value}));
      card.appendChild(b);
    }
    return card;
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

  function show(event) {
    if (event.seq) lastSeq = Math.max(lastSeq, event.seq);
    const p = event.payload || {};
    if (event.type === "turn.delta") { $("live").textContent += event.text; return; }
    if (event.type === "approval.accepted" || event.type === "stop.accepted") { $("status").textContent = event.type; return; }
    if (event.type === "error") { $("status").textContent = `${event.code}: ${event.message}`; return; }
    const li = el("li");
    li.appendChild(el("span", "kind", event.kind || event.type));
    if (event.kind === "user") li.appendChild(el("span", "user", p.content));
    else if (event.kind === "assistant") {
      $("live").textContent = "";
      li.appendChild(el("span", "assistant", p.content + (p.tool_calls || []).map((c) => `\n→ ${c.name}(${c.arguments})`).join("")));
    } else if (event.kind === "tool_result") li.appendChild(el("span", "tool", `[${p.status}] ${p.name}: ${p.content}`));
    else if (event.kind === "control:approval_requested") li.appendChild(approvalCard(event));
    else if (event.type === "compaction" || event.type === "compaction.probe" || event.type === "compaction.quota") {
      li.className = "compaction"; li.appendChild(compactionMarker(event));
    }
    else li.appendChild(el("span", "tool", JSON.stringify(p)));
    $("events").appendChild(li);
    if (event.kind === "control:exchange_settled") $("status").textContent = `exchange ended: ${p.outcome}`;
  }

  function connect() {
    if (socket) socket.close();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/sessions/${session}/?after=${lastSeq}`);
    socket.onmessage = (m) => show(JSON.parse(m.data));
    socket.onclose = () => setTimeout(() => session && connect(), 1000);
  }

  function open(id) {
    session = id; lastSeq = 0; $("events").innerHTML = ""; $("status").textContent = `session ${id}`;
    document.querySelectorAll("#sessions li").forEach((li) => li.classList.toggle("current", li.dataset.id == id));
    connect();
  }

  async function load() {
    const {body} = await api("/api/sessions/");
    $("sessions").innerHTML = "";
    for (const s of body) {
      const li = el("li", "", `#${s.id} ${s.title || s.agent}`); li.dataset.id = s.id; li.onclick = () => open(s.id);
      $("sessions").appendChild(li);
    }
  }

  $("new-session").onclick = async () => { const {body} = await api("/api/sessions/", {method: "POST", body: "{}"}); await load(); open(body.id); };
  $("composer").onsubmit = async (e) => {
    e.preventDefault(); if (!session) return;
    const r = await api(`/api/sessions/${session}/messages/`, {method: "POST", body: JSON.stringify({content: $("message").value})});
    $("status").textContent = r.status === 202 ? "sent" : `${r.body.code}: ${r.body.message}`;
    if (r.status === 202) $("message").value = "";
  };
  $("stop").onclick = () => session && api(`/api/sessions/${session}/stop/`, {method: "POST"});
  load();
})();
