// The task strip (SPEC S5, O4): running and recently failed async tasks of a chat source.
// Self-contained: it loads from GET /api/{source}/tasks, then follows `task.update` events that the
// console hands it (a reload therefore shows the same strip). Successes leave the strip once
// delivered: their result is already a message in the conversation. A running task's MCP call that
// reports progress (`task.progress`, live only) shows it beside the task until the task moves on.
(function () {
  const SHOWN = new Set(["queued", "running", "failed", "refused", "succeeded", "cancelled"]);
  // A failure or a refusal stays in the strip once delivered: the user should see it went wrong.
  const FAILED = new Set(["failed", "refused"]);

  function create(root, options) {
    const tasks = new Map();  // job id -> latest payload
    const source = options.source || "web";
    const api = options.api;

    function label(t) {
      if (t.delivered) return FAILED.has(t.status) ? `${t.status} (delivered)` : "delivered";
      return t.status;
    }

    function render() {
      root.innerHTML = "";
      const visible = [...tasks.values()].filter((t) => SHOWN.has(t.status) && !(t.delivered && !FAILED.has(t.status)))
        .sort((a, b) => b.job - a.job);
      const done = [...tasks.values()].filter((t) => t.delivered && !FAILED.has(t.status));
      root.hidden = !visible.length && !done.length;
      for (const t of [...visible, ...done.slice(0, 3)]) {
        const item = document.createElement("span");
        item.className = `task task-${t.delivered ? "delivered" : t.status}`;
        item.dataset.job = t.job;
        const link = document.createElement("a");
        link.href = "#";
        link.textContent = `#${t.job} ${t.agent}: ${label(t)}`;
        link.title = t.task + (t.error ? `\n${t.error}` : "") + (t.output ? `\n\n${t.output}` : "");
        link.onclick = (e) => { e.preventDefault(); if (t.child_session && options.onOpen) options.onOpen(t.child_session); };
        item.appendChild(link);
        if (t.progress && (t.status === "running" || t.status === "queued") && !t.delivered) {
          const progress = document.createElement("span");
          progress.className = "task-progress";
          progress.textContent = ` — ${t.progress}`;
          item.appendChild(progress);
        }
        if (t.kind === "cron" && t.output) {  // the result inline, clipped; the link opens the whole run
          const output = document.createElement("span");
          output.className = "task-output";
          output.textContent = ` — ${t.output.slice(0, 160)}`;
          item.appendChild(output);
        }
        root.appendChild(item);
      }
    }

    return {
      async load() {
        const {status, body} = await api(`/api/${encodeURIComponent(source)}/tasks?limit=50`);
        if (status !== 200) return;
        for (const row of body.results || []) {
          const run = row.run || {};
          tasks.set(row.id, {job: row.id, status: run.status || row.status, agent: row.agent, task: row.task,
            child_session: row.child_session, delivered: !!run.delivered, error: run.error || ""});
        }
        render();
      },
      update(payload) {
        // A cron run's ending reaches its home conversation too, with its output (issue 27 §7).
        if (!payload || (payload.kind !== "task" && payload.kind !== "cron")) return;
        tasks.set(payload.job, {...(tasks.get(payload.job) || {}), ...payload});
        render();
      },
      // An MCP call's notifications/progress inside a task: "tool: 2 of 3 — step 2". Returns the
      // text (for the console's status line), or "" for a task this strip does not show.
      progress(p) {
        const t = tasks.get(p.job);
        if (!t) return "";
        t.progress = `${p.tool}: ${p.progress}${p.total ? ` of ${p.total}` : ""}${p.message ? ` — ${p.message}` : ""}`;
        t.status = t.status === "queued" ? "running" : t.status;
        render();
        return `#${t.job} ${t.agent}: ${t.progress}`;
      },
      clear() { tasks.clear(); render(); },
    };
  }

  window.SkaldTaskStrip = {create};
})();
