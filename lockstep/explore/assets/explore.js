// lockstep explore: draws the explorer's document (lockstep/explore/session.py) and drives it.
//
// Two modes. Live (`lockstep explore`): the Python process behind the page holds the session; every
// button posts to api/<verb> (relative to the page's URL, which carries the session's token) and the
// answer is the new document. Static (`lockstep show --html`): the document is inlined in the page
// (script#lockstep-document) and stepping moves the cursor here; there is nothing to take or export.
// Every text from the document goes into the page through textContent, never as HTML.
"use strict";

(function () {
  const inline = document.getElementById("lockstep-document");
  const live = inline === null;
  let model = null; // the document drawn last

  function element(tag, attributes, ...children) {
    const made = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "className") made.className = value;
      else made.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      made.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return made;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function status(text, isError) {
    const node = document.getElementById("status");
    node.textContent = text || "";
    node.className = isError ? "error" : "";
  }

  // ------------------------------------------------------------------------------ the document
  function factsAt(doc, position) {
    return position === 0 ? doc.initial.facts : doc.steps[position - 1].facts;
  }

  // The state after `position` steps: the initial entries with the steps' changes applied (null
  // where a step has no model state).
  function stateAt(doc, position) {
    if (!doc.initial.facts) return null;
    const values = new Map(doc.initial.entries.map(([label, value]) => [label, value]));
    for (let index = 0; index < position; index++) {
      const step = doc.steps[index];
      if (!step.facts) return null;
      for (const [label, , after] of step.changes) values.set(label, after);
    }
    return values;
  }

  // Per property: the first position (0..cursor) where an `always` is false or a `sometimes` holds.
  function firstPositions(doc) {
    const failing = new Map();
    const witnessed = new Map();
    for (let position = 0; position <= doc.cursor; position++) {
      const facts = factsAt(doc, position);
      if (!facts) continue;
      for (const name of facts.failing) if (!failing.has(name)) failing.set(name, position);
      for (const name of facts.witnessed) if (!witnessed.has(name)) witnessed.set(name, position);
    }
    return { failing, witnessed };
  }

  // Every position where some `always` property becomes false along the whole path.
  function violationPositions(doc) {
    const seen = new Set();
    const found = new Map();
    for (let position = 0; position <= doc.steps.length; position++) {
      const facts = factsAt(doc, position);
      if (!facts) continue;
      const fresh = facts.failing.filter((name) => !seen.has(name));
      fresh.forEach((name) => seen.add(name));
      if (fresh.length) found.set(position, fresh);
    }
    return found;
  }

  // ------------------------------------------------------------------------------------ drawing
  function drawHeader(doc) {
    document.getElementById("title").textContent = "lockstep explore: " + doc.title;
    document.title = "lockstep explore: " + doc.title;
    const summary = document.getElementById("summary");
    const source = doc.source || {};
    const parts = [];
    if (source.kind === "trace") {
      parts.push("trace " + (source.files || []).join(", "));
      if (source.property) parts.push("a counterexample of " + source.property);
      if (source.summary) parts.push(source.summary);
    } else {
      parts.push("the model from its initial state");
    }
    if (doc.model) parts.push(doc.model.change || "");
    summary.textContent = parts.filter(Boolean).join(" · ");
    summary.className = source.verdict === "violated" || source.verdict === "diverges" ? "bad" : "";
    document.getElementById("position").textContent = "step " + doc.cursor + " of " + doc.steps.length;
    document.getElementById("back").disabled = doc.cursor === 0;
    document.getElementById("forward").disabled = doc.cursor >= doc.steps.length;
    document.getElementById("export").hidden = !doc.interactive;
  }

  function groupLanes(doc) {
    const lanes = new Map();
    for (const group of doc.communicators) lanes.set(group.name, group.lanes);
    return lanes;
  }

  function waitingByLane(doc, facts) {
    const waiting = new Map();
    if (!facts || !facts.posted) return waiting;
    for (const group of doc.communicators) {
      (facts.posted[group.name] || []).forEach((ops, member) => {
        const lane = group.lanes[member];
        if (!lane || !ops.length) return;
        const list = waiting.get(lane) || [];
        list.push(ops[0] + " (" + group.name + ")");
        waiting.set(lane, list);
      });
    }
    return waiting;
  }

  function drawSwimlanes(doc) {
    const table = clear(document.getElementById("swimlanes"));
    const head = element("tr", {}, element("th", {}, "#"));
    for (const lane of doc.lanes) head.append(element("th", { "data-lane": lane }, lane));
    table.append(element("thead", {}, head));
    const body = element("tbody");
    const members = groupLanes(doc);
    const violations = violationPositions(doc);
    const divergenceStep = doc.divergence ? doc.divergence.step : null;

    const initial = element("tr", { "data-step": 0, className: doc.cursor === 0 ? "current" : "" });
    initial.append(element("td", { className: "number" }, "0"));
    const initialWaiting = waitingByLane(doc, doc.initial.facts);
    for (const lane of doc.lanes) {
      const cell = element("td");
      for (const label of initialWaiting.get(lane) || []) cell.append(element("span", { className: "wait" }, "waits in " + label));
      initial.append(cell);
    }
    const first = initial.children[1] || initial.children[0];
    first.prepend(element("span", { className: "muted" }, "initial state"));
    if (violations.has(0)) {
      first.append(element("span", { className: "badge" }, "✗ " + violations.get(0).join(", ")));
      initial.classList.add("violation");
    }
    body.append(initial);

    doc.steps.forEach((step, index) => {
      const number = index + 1;
      const classes = [];
      if (number === doc.cursor) classes.push("current");
      if (number > doc.cursor) classes.push("future");
      if (violations.has(number)) classes.push("violation");
      if (number === divergenceStep) classes.push("divergence");
      const row = element("tr", { "data-step": number, className: classes.join(" ") });
      row.append(element("td", { className: "number" }, String(number)));
      const spanned = step.completes ? (members.get(step.completes) || []).filter((lane) => lane) : [];
      const owner = doc.lanes.includes(step.actor) ? step.actor : spanned[0];
      const waiting = waitingByLane(doc, step.facts);
      for (const lane of doc.lanes) {
        const cell = element("td", { "data-lane": lane });
        const inGroup = spanned.includes(lane);
        if (lane === owner || inGroup) {
          if (inGroup) cell.className = "group";
          cell.append(element("span", { className: "action", title: step.description || "" }, (inGroup ? "⇄ " : "") + step.label));
          if (step.origin === "taken") cell.append(element("span", { className: "muted" }, " (taken)"));
        }
        if (lane === owner) {
          if (step.mirrors) cell.append(element("span", { className: "mirrors" }, step.mirrors));
          const changed = step.changes.map(([label, before, after]) => label + ": " + before + " → " + after);
          if (!step.facts && doc.model) changed.push("(no model state)");
          else if (step.candidates > 1) changed.push("(one of " + step.candidates + " candidate states)");
          if (changed.length) cell.append(element("span", { className: "changes" }, changed.join("\n")));
          if (violations.has(number)) cell.append(element("span", { className: "badge" }, "✗ " + violations.get(number).join(", ")));
          if (number === divergenceStep) cell.append(element("span", { className: "badge" }, "✗ diverges here"));
        }
        for (const label of waiting.get(lane) || []) cell.append(element("span", { className: "wait" }, "waits in " + label));
        row.append(cell);
      }
      body.append(row);
    });
    table.append(body);
    const current = table.querySelector("tr.current");
    if (current && current.scrollIntoView) current.scrollIntoView({ block: "nearest" });
  }

  function drawDivergence(doc) {
    const panel = document.getElementById("divergence-panel");
    const node = clear(document.getElementById("divergence"));
    const divergence = doc.divergence;
    panel.hidden = !divergence;
    if (!divergence) return;
    const here = doc.cursor === divergence.step - 1 || doc.cursor === divergence.step;
    const where = divergence.file ? " (" + divergence.file + ":" + divergence.line + ")" : "";
    node.append(
      element("p", {}, "At step " + divergence.step + ", event " + divergence.event + where + ", the trace leaves the model: " + (divergence.reason || "")),
    );
    if (!here) {
      node.append(element("p", { className: "muted" }, "Jump to step " + (divergence.step - 1) + " to see the state the event was taken from."));
    }
    (divergence.candidates || []).forEach((candidate, index) => {
      node.append(element("p", {}, "candidate state " + (index + 1) + " of " + divergence.candidate_count + ":"));
      const list = element("ul");
      for (const why of candidate.why || []) list.append(element("li", {}, why));
      node.append(list);
    });
  }

  function drawProperties(doc) {
    const table = clear(document.getElementById("properties"));
    table.append(element("thead", {}, element("tr", {}, element("th", {}, "property"), element("th", {}, "here"), element("th", {}, "on the path"))));
    const body = element("tbody");
    const facts = factsAt(doc, doc.cursor);
    const first = firstPositions(doc);
    for (const prop of doc.properties) {
      let here = "—";
      let along = "";
      let violated = false;
      let holdsHere = false;
      if (prop.kind === "always") {
        if (facts) {
          const falseHere = facts.failing.includes(prop.name);
          here = falseHere ? "✗ false" : "✓ holds";
          holdsHere = !falseHere;
        }
        if (first.failing.has(prop.name)) {
          violated = true;
          along = "violated: first false at step " + first.failing.get(prop.name);
        } else {
          along = "holds so far";
        }
      } else if (prop.kind === "sometimes") {
        if (facts) {
          holdsHere = facts.witnessed.includes(prop.name);
          here = holdsHere ? "✓ true" : "not here";
        }
        along = first.witnessed.has(prop.name) ? "witnessed at step " + first.witnessed.get(prop.name) : "not witnessed yet";
      } else {
        here = "not evaluated";
        along = "liveness: needs an infinite run";
      }
      const row = element("tr", { "data-property": prop.name, className: violated ? "violated" : "" });
      row.append(
        element("td", {}, element("strong", {}, prop.name), " ", element("span", { className: "muted" }, prop.kind + (prop.builtin ? ", built-in" : "")), element("div", { className: "sentence" }, prop.description || "")),
        element("td", { className: "status here" + (holdsHere ? " holds" : "") }, here),
        element("td", { className: "status" }, along),
      );
      body.append(row);
    }
    table.append(body);
  }

  function drawCollectives(doc) {
    const node = clear(document.getElementById("collectives"));
    const facts = factsAt(doc, doc.cursor);
    if (!doc.communicators.length) {
      node.append(element("p", { className: "muted" }, "The model has no communicators."));
      return;
    }
    if (!facts || !facts.posted) {
      node.append(element("p", { className: "muted" }, "No model state at this step."));
      return;
    }
    for (const group of doc.communicators) {
      const posted = facts.posted[group.name] || [];
      const table = element("table", { "data-communicator": group.name });
      const head = element("tr", {}, element("th", {}, group.name));
      group.lanes.forEach((lane, member) => head.append(element("th", {}, lane || "member " + member)));
      const fronts = posted.map((ops) => (ops.length ? ops[0].replace(/#\d+$/, "") : null)).filter((op) => op !== null);
      const mismatch = new Set(fronts).size > 1;
      const row = element("tr", {}, element("td", { className: "muted" }, "posted"));
      posted.forEach((ops) => row.append(element("td", { className: mismatch && ops.length ? "mismatch" : "" }, ops.length ? ops.join(", ") : "—")));
      table.append(element("thead", {}, head), element("tbody", {}, row));
      node.append(table);
    }
  }

  function drawState(doc) {
    const table = clear(document.getElementById("state"));
    document.getElementById("state-title").textContent = "State at step " + doc.cursor;
    const note = document.getElementById("state-note");
    const values = stateAt(doc, doc.cursor);
    if (values === null) {
      note.textContent = doc.model ? "No model state at this step: the trace left the model before it." : "No model states: " + ((doc.source || {}).summary || "");
      if (doc.cursor > 0) {
        const observed = doc.steps[doc.cursor - 1].observed;
        if (observed) {
          const body = element("tbody");
          for (const [label, value] of Object.entries(observed)) body.append(element("tr", { "data-entry": label }, element("td", {}, label), element("td", { className: "value" }, JSON.stringify(value))));
          table.append(element("thead", {}, element("tr", {}, element("th", {}, "observed by the event"), element("th", {}, "value"))), body);
        }
      }
      return;
    }
    const step = doc.cursor > 0 ? doc.steps[doc.cursor - 1] : null;
    const changed = new Map((step ? step.changes : []).map(([label, before]) => [label, before]));
    const facts = factsAt(doc, doc.cursor);
    const notes = [];
    if (step && step.candidates > 1) notes.push("one of " + step.candidates + " model states consistent with the trace");
    if (facts && facts.error) notes.push("model error: " + facts.error);
    if (facts && facts.enabled === 0) notes.push(facts.final ? "a final state" : "no action is enabled (deadlock)");
    note.textContent = notes.join("; ");
    table.append(element("thead", {}, element("tr", {}, element("th", {}, "variable"), element("th", {}, "value"))));
    const body = element("tbody");
    for (const [label, value] of values) {
      const was = changed.has(label) ? "was " + changed.get(label) : null;
      body.append(element("tr", { "data-entry": label, className: was ? "changed" : "", title: was }, element("td", {}, label), element("td", { className: "value" }, value)));
    }
    table.append(body);
  }

  function drawEnabled(doc) {
    const panel = document.getElementById("enabled-panel");
    panel.hidden = !doc.interactive;
    if (!doc.interactive) return;
    const list = clear(document.getElementById("enabled"));
    const beyond = doc.cursor < doc.steps.length;
    document.getElementById("enabled-note").textContent =
      "(" + doc.enabled.length + " at step " + doc.cursor + (beyond ? "; taking one replaces steps " + (doc.cursor + 1) + "–" + doc.steps.length : "") + ")";
    if (!doc.enabled.length) {
      const facts = factsAt(doc, doc.cursor);
      list.append(element("li", { className: "muted" }, facts ? "none: nothing can happen here" : "none: no model state at this step"));
    }
    for (const choice of doc.enabled) {
      const changes = choice.changes.map(([label, before, after]) => label + ": " + before + " → " + after).join("\n");
      const title = [choice.description, changes].filter(Boolean).join("\n\n");
      const button = element(
        "button",
        { type: "button", title: title, "data-action": choice.action, "data-label": choice.label },
        element("span", { className: "action" }, choice.label),
        " ",
        element("span", { className: "actor" }, choice.actor),
        choice.leaves_bounds ? element("span", { className: "badge" }, " leaves the bounds of " + choice.leaves_bounds) : null,
        choice.mirrors ? element("span", { className: "mirrors" }, choice.mirrors) : null,
      );
      button.addEventListener("click", () => act("take", { at: doc.cursor, action: choice.action, arguments: choice.arguments }));
      list.append(element("li", {}, button));
    }
  }

  function draw(doc) {
    model = doc;
    drawHeader(doc);
    // the sticky header's height, for the side panel's and the rows' offsets (CSSOM, allowed by the page's CSP)
    document.documentElement.style.setProperty("--header", document.getElementById("header").offsetHeight + "px");
    drawSwimlanes(doc);
    drawDivergence(doc);
    drawEnabled(doc);
    drawProperties(doc);
    drawCollectives(doc);
    drawState(doc);
    document.body.setAttribute("data-cursor", String(doc.cursor));
  }

  // ------------------------------------------------------------------------------------ actions
  async function post(verb, body) {
    const response = await fetch("api/" + verb, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body || {}),
      cache: "no-store",
    });
    const answer = await response.json().catch(() => ({ error: "the explorer answered " + response.status }));
    if (!response.ok) throw new Error(answer.error || "the explorer answered " + response.status);
    return answer;
  }

  function exported(answer) {
    status("wrote " + answer.file + " ");
    const blob = new Blob([answer.text], { type: "application/x-ndjson" });
    const link = element("a", { href: URL.createObjectURL(blob), download: answer.file.split("/").pop() }, "download");
    document.getElementById("status").append(link);
  }

  async function act(verb, body) {
    if (!live) {
      const doc = model;
      if (verb === "back") doc.cursor = Math.max(0, doc.cursor - 1);
      else if (verb === "forward") doc.cursor = Math.min(doc.steps.length, doc.cursor + 1);
      else if (verb === "jump") doc.cursor = body.step;
      else if (verb === "reset") doc.cursor = 0;
      draw(doc);
      return;
    }
    try {
      const answer = await post(verb, body);
      if (verb === "export") exported(answer);
      else status("");
      draw(answer.document);
    } catch (error) {
      status(error.message, true);
    }
  }

  document.getElementById("reset").addEventListener("click", () => act("reset"));
  document.getElementById("back").addEventListener("click", () => act("back"));
  document.getElementById("forward").addEventListener("click", () => act("forward"));
  document.getElementById("export").addEventListener("click", () => act("export"));
  document.getElementById("swimlanes").addEventListener("click", (event) => {
    const row = event.target.closest("tr[data-step]");
    if (row && model) act("jump", { step: Number(row.getAttribute("data-step")) });
  });
  document.addEventListener("keydown", (event) => {
    if (event.target instanceof HTMLInputElement) return;
    if (event.key === "ArrowLeft") act("back");
    if (event.key === "ArrowRight") act("forward");
  });

  if (live) {
    fetch("api/state", { cache: "no-store" })
      .then((response) => response.json())
      .then((answer) => {
        if (answer.error) throw new Error(answer.error);
        draw(answer.document);
      })
      .catch((error) => status(error.message, true));
  } else {
    draw(JSON.parse(inline.textContent));
  }
})();
