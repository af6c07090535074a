// Live admin fragments. An element with data-live-url is re-fetched and swapped in place:
// - with data-live-session="<id>", whenever the session websocket reports a committed event
//   (the page follows the event log, not a timer); polling takes over if the socket is refused;
// - otherwise every data-live-every milliseconds (queues and the home).
// Open <details> (expanded payloads) stay open across a swap.
(function () {
  "use strict";
  function swap(node, html) {
    if (node.dataset.lastHtml === html) return;
    const open = new Set([...node.querySelectorAll("details[open][data-key]")].map((d) => d.dataset.key));
    node.innerHTML = html;
    node.dataset.lastHtml = html;
    node.querySelectorAll("details[data-key]").forEach((d) => { if (open.has(d.dataset.key)) d.open = true; });
    node.dispatchEvent(new CustomEvent("skald:swapped", {bubbles: true}));
  }
  function refresher(node) {
    let busy = false, again = false;
    return async function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      try {
        const r = await fetch(node.dataset.liveUrl, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}});
        if (r.ok) swap(node, await r.text());
      } catch (e) { /* the next event or tick retries */ }
      busy = false;
      if (again) { again = false; refresh(); }
    };
  }
  function poll(node, refresh, every) {
    node.classList.add("live-polling");
    setInterval(refresh, every);
  }
  function follow(node, refresh) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    let after = parseInt(node.dataset.liveAfter || "0", 10), retries = 0;
    function connect() {
      const socket = new WebSocket(`${scheme}://${location.host}/ws/sessions/${node.dataset.liveSession}/?after=${after}`);
      socket.onopen = () => { retries = 0; node.classList.add("live-connected"); };
      socket.onmessage = (m) => {
        const event = JSON.parse(m.data);
        if (event.seq) { after = Math.max(after, event.seq); refresh(); }
      };
      socket.onclose = (e) => {
        node.classList.remove("live-connected");
        if (e.code >= 4400 && e.code < 4500) { poll(node, refresh, 2000); return; }  // not allowed: poll the page
        retries += 1;
        setTimeout(connect, Math.min(5000, 500 * retries));
      };
    }
    connect();
  }
  // A queue page: reload when the queue's signature changes, unless the viewer is mid-selection.
  function watch(node) {
    let seen = null;
    setInterval(async () => {
      try {
        const r = await fetch(node.dataset.liveSignatureUrl, {credentials: "same-origin"});
        if (!r.ok) return;
        const {signature} = await r.json();
        const busy = document.querySelector(".action-select:checked") || document.activeElement?.matches("input,textarea,select");
        if (seen !== null && signature !== seen && !busy) location.reload();
        seen = seen === null || !busy ? signature : seen;
      } catch (e) { /* next tick */ }
    }, parseInt(node.dataset.liveEvery || "2000", 10));
  }
  function start() {
    document.querySelectorAll("[data-live-signature-url]").forEach(watch);
    document.querySelectorAll("[data-live-url]").forEach((node) => {
      const refresh = refresher(node);
      if (node.dataset.liveSession) follow(node, refresh);
      else poll(node, refresh, parseInt(node.dataset.liveEvery || "3000", 10));
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
