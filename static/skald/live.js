// Live admin pages: nothing polls while the server can tell the page that something changed.
// - data-live-url + data-live-session="<id>" (the run page): the fragment is re-read whenever the
//   session websocket reports a committed event;
// - data-live-url + data-live-topics="a,b" (the home): the fragment is re-read whenever a change to
//   one of those topics commits (the admin live socket, ws/admin/live/, fed through the channel
//   layer by every committed audit row of the topic);
// - data-live-page="#changelist" + data-live-topics (the queues): that part of the page is re-read
//   from the page's own URL and swapped in place, unless the viewer is mid-selection or typing
//   (then it waits for them to finish).
// Only a refused socket (no permission, 44xx) falls back to polling, every data-live-every ms.
// Open <details> (expanded payloads) stay open across a swap.
(function () {
  "use strict";
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const FALLBACK_EVERY = 5000;

  // Whether the page already shows this markup: compared as the browser parses both, so a re-read
  // that changed nothing replaces no element (a link the viewer is about to click stays valid).
  function shows(node, html) {
    const probe = document.createElement(node.tagName);
    probe.innerHTML = html;
    return probe.innerHTML.trim() === node.innerHTML.trim();
  }
  function swap(node, html) {
    if (node.dataset.lastHtml === html) return;
    if (shows(node, html)) { node.dataset.lastHtml = html; return; }
    const open = new Set([...node.querySelectorAll("details[open][data-key]")].map((d) => d.dataset.key));
    node.innerHTML = html;
    node.dataset.lastHtml = html;
    node.querySelectorAll("details[data-key]").forEach((d) => { if (open.has(d.dataset.key)) d.open = true; });
    node.dispatchEvent(new CustomEvent("skald:swapped", {bubbles: true}));
  }
  // One fetch at a time per target; a notice that arrives meanwhile schedules exactly one more.
  // node.dataset.liveReads counts finished re-reads (tests wait on it instead of on time).
  function coalesced(node, load) {
    let busy = false, again = false;
    return async function run() {
      if (busy) { again = true; return; }
      busy = true;
      try { await load(); } catch (e) { /* the next notice retries */ }
      node.dataset.liveReads = String(1 + parseInt(node.dataset.liveReads || "0", 10));
      busy = false;
      if (again) { again = false; run(); }
    };
  }
  function fragment(node) {
    return coalesced(node, async () => {
      const r = await fetch(node.dataset.liveUrl, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}});
      if (r.ok) swap(node, await r.text());
    });
  }
  function viewerBusy() {
    return document.querySelector(".action-select:checked") || document.activeElement?.matches("input,textarea,select");
  }
  // A changelist: re-read the page and swap its list part; re-arm Django's action checkboxes.
  function page(marker) {
    const selector = marker.dataset.livePage;
    let waiting = false;
    const load = coalesced(marker, async () => {
      const r = await fetch(location.href, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}});
      if (!r.ok) return;
      const fresh = new DOMParser().parseFromString(await r.text(), "text/html").querySelector(selector);
      const here = document.querySelector(selector);
      if (!fresh || !here) return;
      // Every render masks the CSRF token anew; either token is valid, so it is not a change.
      const token = here.querySelector("input[name=csrfmiddlewaretoken]");
      fresh.querySelectorAll("input[name=csrfmiddlewaretoken]").forEach((i) => { if (token) i.setAttribute("value", token.getAttribute("value")); });
      if (here.innerHTML === fresh.innerHTML) return;
      if (viewerBusy()) { waiting = true; return; }
      here.innerHTML = fresh.innerHTML;
      const boxes = here.querySelectorAll("tr input.action-select");
      if (boxes.length && window.Actions) window.Actions(boxes);
      here.dispatchEvent(new CustomEvent("skald:swapped", {bubbles: true}));
    });
    // Held back for a selection or a field: catch up once the viewer is done with it.
    const resume = () => { if (waiting && !viewerBusy()) { waiting = false; load(); } };
    document.addEventListener("change", () => setTimeout(resume, 0));
    document.addEventListener("focusout", () => setTimeout(resume, 0));
    return load;
  }
  function poll(node, refresh, every) {
    node.classList.add("live-polling");
    setInterval(refresh, every);
  }
  function follow(node, refresh) {
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
  // One admin live socket for the page, shared by every topic-following target on it.
  function listen(targets) {
    const topics = [...new Set(targets.flatMap((t) => t.topics))].sort();
    if (!topics.length) return;
    let retries = 0;
    const mark = (cls, on) => targets.forEach((t) => t.node.classList.toggle(cls, on));
    function connect() {
      const socket = new WebSocket(`${scheme}://${location.host}/ws/admin/live/?topics=${topics.join(",")}`);
      socket.onmessage = (m) => {
        const notice = JSON.parse(m.data);
        if (notice.type === "joined") {
          mark("live-connected", true);
          // Anything that committed before the socket joined (or while it was down) is read now.
          targets.forEach((t) => t.refresh());
          retries = 0;
        } else if (notice.type === "changed") {
          document.documentElement.dataset.liveNotices = String(1 + parseInt(document.documentElement.dataset.liveNotices || "0", 10));
          targets.forEach((t) => { if (t.topics.includes(notice.topic)) t.refresh(); });
        }
      };
      socket.onclose = (e) => {
        mark("live-connected", false);
        if (e.code >= 4400 && e.code < 4500) {  // refused: the page still works, on a timer
          targets.forEach((t) => poll(t.node, t.refresh, parseInt(t.node.dataset.liveEvery || String(FALLBACK_EVERY), 10)));
          return;
        }
        retries += 1;
        setTimeout(connect, Math.min(5000, 500 * retries));
      };
    }
    connect();
  }
  function topicsOf(node) {
    return (node.dataset.liveTopics || "").split(",").map((t) => t.trim()).filter(Boolean);
  }
  function start() {
    const targets = [];
    document.querySelectorAll("[data-live-page]").forEach((node) => {
      targets.push({node, topics: topicsOf(node), refresh: page(node)});
    });
    document.querySelectorAll("[data-live-url]").forEach((node) => {
      const refresh = fragment(node);
      if (node.dataset.liveSession) follow(node, refresh);
      else if (node.dataset.liveTopics !== undefined) targets.push({node, topics: topicsOf(node), refresh});
      else poll(node, refresh, parseInt(node.dataset.liveEvery || "3000", 10));
    });
    listen(targets);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
  // For a page that renders its own list (the console): listen([{node, topics, refresh}]) follows
  // those topics on the same socket, marks node.live-connected while joined, and polls if refused.
  window.SkaldLive = {listen};
})();
