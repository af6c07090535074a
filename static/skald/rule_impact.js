// The rule page's live impact preview (issue 32): as the admin edits a rule, the form's values are
// posted to the admin's impact-preview view, which re-decides the recorded calls under the edited
// policy and saves nothing. The box says what would change before Save is pressed.
(() => {
  const box = document.getElementById("rule-impact");
  const form = document.getElementById("approvalrule_form");
  if (!box || !form) return;
  const text = box.querySelector(".skald-rule-impact-text");
  let timer = null;
  let latest = 0;

  async function preview() {
    const mine = ++latest;
    const data = new FormData(form);
    data.set("rule_id", box.dataset.ruleId || "");
    box.classList.add("skald-busy");
    try {
      const response = await fetch(box.dataset.impactUrl, {
        method: "POST", body: data, credentials: "same-origin", headers: {"X-Requested-With": "fetch"},
      });
      const body = await response.json();
      if (mine !== latest) return;  // a newer edit's preview is on its way
      text.textContent = body.text;
      box.dataset.state = body.state;
    } catch (error) {
      if (mine !== latest) return;
      text.textContent = "the preview is unavailable (" + error + "); saving still checks it.";
      box.dataset.state = "error";
    } finally {
      if (mine === latest) {
        box.classList.remove("skald-busy");
        box.dataset.previews = String(Number(box.dataset.previews) + 1);
      }
    }
  }

  const soon = (delay) => () => { clearTimeout(timer); timer = setTimeout(preview, delay); };
  form.addEventListener("input", soon(400));
  form.addEventListener("change", soon(50));
})();
