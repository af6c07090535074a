// MCP elicitation cards (issue 29, docs/mcp.md "Elicitation"): a server asked the session's owner
// something during a tool call. Self-contained, like the task strip: the console hands it the
// `mcp.elicitation` live deltas and asks it to load a session's pending cards when it opens one
// (the deltas are not durable). The owner answers with a form built from the requested schema
// (strings, numbers, integers, booleans, enums: what MCP allows); anyone else sees who will.
(function () {
  "use strict";

  function node(tag, cls, text) {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined) n.textContent = text;
    return n;
  }

  const STATES = {accepted: "Answered", declined: "Declined", cancelled: "Cancelled",
                  expired: "Expired: nobody answered in time (the server was told no)"};

  function create(options) {
    const cards = new Map();  // elicitation id -> card element
    const api = options.api, append = options.append, myId = options.myId;

    function input(name, prop, required) {
      const row = node("label", "field", `${prop.title || name}${required ? " *" : ""} `);
      let field;
      if (Array.isArray(prop.enum)) {
        field = node("select");
        for (const value of prop.enum) field.appendChild(Object.assign(node("option", "", String(value)), {value}));
      } else if (prop.type === "boolean") {
        field = Object.assign(node("input"), {type: "checkbox"});
      } else {
        field = Object.assign(node("input"), {type: prop.type === "number" || prop.type === "integer" ? "number" : "text"});
      }
      field.name = name;
      field.dataset.type = prop.type || "string";
      if (prop.description) field.title = prop.description;
      row.appendChild(field);
      return row;
    }

    function content(form) {
      const out = {};
      for (const field of form.querySelectorAll("[name]")) {
        const type = field.dataset.type;
        if (type === "boolean") out[field.name] = field.checked;
        else if (field.value === "") continue;  // left empty: the schema says whether it may be
        else if (type === "integer") out[field.name] = parseInt(field.value, 10);
        else if (type === "number") out[field.name] = Number(field.value);
        else out[field.name] = field.value;
      }
      return out;
    }

    function settle(card, p) {
      card.classList.remove("waiting");
      card.classList.add(p.status === "accepted" ? "resolved" : "cancelled");
      const who = p.answered_by && p.answered_by.startsWith("user:") ? ` by ${p.answered_by}` : "";
      card.querySelector(".state").textContent = `${STATES[p.status] || p.status}${p.status === "expired" ? "" : who}`;
      const form = card.querySelector("form");
      if (form) form.remove();
    }

    function build(p) {
      const card = node("div", "card waiting elicitation");
      card.dataset.elicitation = p.id;
      card.appendChild(node("h4", "", `${p.server} asks (${p.tool})`));
      card.appendChild(node("div", "message", p.message));
      const owner = p.owner === undefined || p.owner === null || p.owner === myId;
      if (p.status === "pending" && owner) {
        const form = node("form", "elicitation-form");
        form.onsubmit = (e) => e.preventDefault();
        const schema = p.requested_schema || {}, required = new Set(schema.required || []);
        for (const [name, prop] of Object.entries(schema.properties || {})) form.appendChild(input(name, prop, required.has(name)));
        const actions = node("div", "actions");
        for (const action of ["accept", "decline", "cancel"]) {
          const b = node("button", action, action === "accept" ? "Send" : action === "decline" ? "Decline" : "Cancel");
          b.type = "button";
          b.onclick = async () => {
            card.querySelector(".error").textContent = "";
            const body = action === "accept" ? {action, content: content(form)} : {action};
            const r = await api(`/api/mcp/elicitations/${p.id}/answer`, {method: "POST", body: JSON.stringify(body)});
            if (r.ok) settle(card, r.body);
            else card.querySelector(".error").textContent = `${r.body.message || "refused"} (${r.body.code || r.status})`;
          };
          actions.appendChild(b);
        }
        form.appendChild(actions);
        card.appendChild(form);
      }
      card.appendChild(node("div", "state", p.status === "pending" ? (owner ? "" : "Waiting for the session's owner.") : ""));
      card.appendChild(node("div", "error"));
      return card;
    }

    return {
      show(p) {
        const known = cards.get(p.id);
        if (known) { if (p.status !== "pending") settle(known, p); return; }
        const card = build(p);
        cards.set(p.id, card);
        if (p.status !== "pending") settle(card, p);
        const li = node("li", "ev ev-mcp-elicitation");
        li.appendChild(node("span", "kind", "Question from a tool"));
        li.appendChild(card);
        append(li);
      },
      async load(session) {
        const r = await api(`/api/mcp/elicitations/?session=${encodeURIComponent(session)}`);
        if (r.ok && Array.isArray(r.body)) r.body.forEach((p) => this.show(p));
      },
      waiting() { return [...cards.values()].some((card) => card.classList.contains("waiting")); },
      clear() { cards.clear(); },
    };
  }

  window.SkaldElicitation = {create};
})();
