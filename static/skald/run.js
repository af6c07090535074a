// The run page's journal toggle (as Temporal's compact view): journal rows are hidden by default;
// the choice is remembered in this browser and survives the live region's swaps (the class sits on
// the region itself, which live.js never replaces).
(function () {
  "use strict";
  const KEY = "skald.run.showJournal";
  function apply(show) {
    const live = document.getElementById("run-live");
    if (live) live.classList.toggle("hide-journal", !show);
  }
  document.addEventListener("DOMContentLoaded", () => {
    const toggle = document.getElementById("journal-toggle");
    if (!toggle) return;
    let show = false;
    try { show = localStorage.getItem(KEY) === "1"; } catch (e) { /* storage refused: the default */ }
    toggle.checked = show;
    apply(show);
    toggle.addEventListener("change", () => {
      apply(toggle.checked);
      try { localStorage.setItem(KEY, toggle.checked ? "1" : "0"); } catch (e) { /* not remembered */ }
    });
  });
})();
