// agentenvs view: one renderer for the page's data, served (/api) or inlined in an exported file.
// Plain JavaScript, no dependencies. Views are chosen by the URL's hash:
//   #run/R                 overview, training curves, task list
//   #run/R/task/T          the task's k samples, one line each
//   #run/R/iteration/S     the sampled episodes of training iteration S, one line each
//   #run/R/episode/E       every turn of one episode
//   #compare/A/B[/task/T]  run B against run A (and one task's episodes of both)
"use strict";
(function () {
  const app = document.getElementById("app");
  let data = null; // the index: runs and comparisons
  let source = null; // where episodes come from
  const taskState = {}; // per run: the task list's filters and sort, kept across views

  // ----- where the data comes from ------------------------------------------------------------

  function inlineSource(indexEl, episodesEl) {
    let packed = null;
    const chunks = new Map();
    async function unpack(b64) {
      const bin = atob(b64);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      return JSON.parse(await new Response(stream).text());
    }
    return {
      label: "exported file",
      index: async () => JSON.parse(indexEl.textContent),
      episode(run, id) {
        packed = packed || JSON.parse(episodesEl.textContent);
        const n = Math.floor(id / packed.chunk);
        const key = run + "/" + n;
        if (!chunks.has(key)) chunks.set(key, unpack(packed.runs[run][n]));
        return chunks.get(key).then((list) => list[id % packed.chunk]);
      },
    };
  }

  function serverSource() {
    const cache = new Map();
    async function getJSON(url) {
      const response = await fetch(url);
      const body = await response.json();
      if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
      return body;
    }
    return {
      label: "served",
      index: () => getJSON("api/index"),
      episode(run, id) {
        const url = "api/runs/" + run + "/episodes/" + id;
        if (!cache.has(url)) cache.set(url, getJSON(url));
        return cache.get(url);
      },
    };
  }

  // ----- small helpers ---------------------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const pct = (x) => (x === null || x === undefined ? "-" : (100 * x).toFixed(1) + "%");
  const num = (x, d = 3) => (x === null || x === undefined ? "-" : Number(x).toFixed(d));
  const signed = (x, d = 3) => (x === null || x === undefined ? "-" : (x > 0 ? "+" : "") + Number(x).toFixed(d));
  const show = (value) => (typeof value === "string" ? value : JSON.stringify(value));
  const go = (hash) => { location.hash = hash; };
  const taskHash = (r, task) => "#run/" + r + "/task/" + encodeURIComponent(task);

  function problem(message) {
    const box = document.getElementById("problem");
    box.hidden = !message;
    box.textContent = message || "";
  }

  function outcome(e) {
    if (e.part === "replay") {
      const status = e.status || "not validated";
      return h("span", { class: status === "validated" ? "won" : "errored" }, status);
    }
    if (e.error) return h("span", { class: "errored" }, "error: " + e.error);
    return e.won ? h("span", { class: "won" }, "won") : h("span", { class: "lost" }, "lost");
  }

  function table(spec) {
    return h("div", {},
      h("h3", {}, spec.title),
      spec.rows.length
        ? h("table", { class: "grid" },
            h("tr", {}, spec.columns.map((c) => h("th", {}, c))),
            spec.rows.map((row) => h("tr", {}, row.map((cell) =>
              h("td", { class: typeof cell === "number" ? "num" : null }, cell)))))
        : null,
      spec.note ? h("div", { class: "note" }, spec.note) : null);
  }

  // A list that renders only the rows in view: rows are absolutely placed in a tall box.
  function virtualList(items, rowHeight, columns, renderRow, onClick) {
    const inner = h("div", { class: "vlist-inner" });
    inner.style.height = items.length * rowHeight + "px";
    const outer = h("div", { class: "vlist" }, inner);
    outer.style.height = "min(60vh, " + (items.length * rowHeight + 2) + "px)";
    let shown = "";
    function paint() {
      const height = outer.clientHeight || 600;
      const first = Math.max(0, Math.floor(outer.scrollTop / rowHeight) - 8);
      const last = Math.min(items.length, Math.ceil((outer.scrollTop + height) / rowHeight) + 8);
      if (shown === first + ":" + last) return;
      shown = first + ":" + last;
      const rows = [];
      for (let i = first; i < last; i++) {
        const row = h("div", { class: "vrow", onclick: () => onClick(items[i]) }, renderRow(items[i]));
        row.style.top = i * rowHeight + "px";
        row.style.height = rowHeight + "px";
        row.style.gridTemplateColumns = columns;
        rows.push(row);
      }
      inner.replaceChildren(...rows);
    }
    let pending = false;
    outer.addEventListener("scroll", () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; paint(); });
    });
    requestAnimationFrame(paint);
    paint();
    return outer;
  }

  const PALETTE = ["#2456b3", "#c62828", "#1a7f37", "#b26a00", "#7b3fb3", "#00838f"];

  function lineChart(chart) {
    const W = 380, H = 170, L = 46, R = 8, T = 8, B = 22;
    const points = chart.series.flatMap((s) => s.points);
    const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
    let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 >= 0 && y1 <= 1) { y0 = 0; y1 = 1; } // rates and fractions: the whole range
    else if (y0 === y1) { y0 -= 1; y1 += 1; }
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(ns, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
      if (text !== undefined) node.textContent = text;
      svg.append(node);
    };
    add("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#aab" });
    add("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#aab" });
    add("text", { x: L - 4, y: T + 9, "text-anchor": "end", "font-size": 10 }, +y1.toPrecision(3));
    add("text", { x: L - 4, y: H - B, "text-anchor": "end", "font-size": 10 }, +y0.toPrecision(3));
    add("text", { x: L, y: H - 6, "font-size": 10 }, x0);
    add("text", { x: W - R, y: H - 6, "text-anchor": "end", "font-size": 10 }, "iteration " + x1);
    chart.series.forEach((s, i) => {
      const color = PALETTE[i % PALETTE.length];
      const path = s.points.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
      add("polyline", { points: path, fill: "none", stroke: color, "stroke-width": 1.6 });
      if (s.points.length < 40) s.points.forEach((p) => add("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.2, fill: color }));
    });
    const legend = h("div", { class: "legend" }, chart.series.map((s, i) => {
      const swatch = h("i");
      swatch.style.background = PALETTE[i % PALETTE.length];
      return h("span", {}, swatch, s.name);
    }));
    return h("div", { class: "chart" }, h("div", { class: "title" }, chart.title), svg, legend);
  }

  // ----- run overview and task list ----------------------------------------------------------

  function metaTable(run) {
    const m = run.meta;
    const rows = [
      ["environment", m.env_id], ["agent", m.agent], ["model", m.model], ["algorithm", m.algo],
      ["protocol", m.protocol], ["training protocol", m.training_protocol], ["variant", m.variant ? show(m.variant) : null],
      ["split", m.split], ["k (Avg@k, Pass@k)", m.k], ["samples per task", m.n],
      ["overrides", m.overrides && Object.keys(m.overrides).length ? show(m.overrides) : null],
      ["replay stage", m.stage], ["path", run.path],
    ].filter((r) => r[1] !== null && r[1] !== undefined && r[1] !== "");
    return h("table", { class: "grid meta" }, rows.map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", {}, v))));
  }

  function runView(r) {
    const run = data.runs[r];
    const evalCount = run.episodes.filter((e) => e.part !== "train").length;
    return h("div", {},
      h("h2", {}, run.name, " ", h("span", { class: "badge" }, run.kind)),
      h("div", { class: "muted" }, evalCount + " evaluation episodes" +
        (run.kind === "replay" ? " (queries)" : "") + ", " + run.tasks.length + " tasks"),
      metaTable(run),
      run.notes.map((n) => h("div", { class: "note" }, n)),
      run.tables.map(table),
      run.training ? trainingView(r, run) : null,
      run.tasks.length ? taskList(r, run) : null);
  }

  function trainingView(r, run) {
    const t = run.training;
    const its = t.iterations;
    return h("div", {},
      h("h3", {}, "training: " + t.steps + " iterations logged"),
      h("div", { class: "charts" }, t.curves.map(lineChart)),
      its.length
        ? h("div", {}, h("h3", {}, "sampled episodes per iteration"),
            h("table", { class: "grid" },
              h("tr", {}, h("th", {}, "iteration"), h("th", {}, "episodes"), h("th", {}, "success")),
              its.map((it) => h("tr", {},
                h("td", {}, h("a", { href: "#run/" + r + "/iteration/" + it.step }, "iteration " + it.step)),
                h("td", { class: "num" }, it.episodes.length), h("td", { class: "num" }, pct(it.success))))))
        : h("div", { class: "muted" }, "no sampled episodes in episodes/ (train rl writes them unless save_episodes=false)"));
  }

  const SORTS = {
    order: null,
    "success, low first": (a, b) => (a.rate ?? -1) - (b.rate ?? -1),
    "success, high first": (a, b) => (b.rate ?? -1) - (a.rate ?? -1),
    "errors, most first": (a, b) => b.errors - a.errors,
  };

  function taskList(r, run) {
    const state = taskState[r] || (taskState[r] = { family: "", outcome: "", error: "", text: "", sort: "order" });
    const families = [...new Set(run.tasks.map((t) => t.family))].sort();
    const listBox = h("div");
    const count = h("span", { class: "muted" });
    const replay = run.kind === "replay";
    const select = (key, options) => {
      const node = h("select", { "data-filter": key, onchange: () => { state[key] = node.value; refresh(); } },
        options.map(([value, label]) => h("option", { value, selected: state[key] === value }, label)));
      return node;
    };
    const sort = select("sort", Object.keys(SORTS).map((s) => [s, "sort: " + s]));
    const text = h("input", { placeholder: "task id contains", value: state.text, oninput: () => { state.text = text.value; refresh(); } });
    function refresh() {
      let tasks = run.tasks.filter((t) =>
        (!state.family || t.family === state.family) &&
        (!state.text || t.task_id.includes(state.text)) &&
        (!state.outcome || (state.outcome === "all" ? t.n > 0 && t.c === t.n : state.outcome === "none" ? t.c === 0 : t.c > 0 && t.c < t.n)) &&
        (!state.error || (state.error === "with" ? t.errors > 0 : t.errors === 0)));
      if (SORTS[state.sort]) tasks = [...tasks].sort(SORTS[state.sort]);
      count.textContent = tasks.length + " of " + run.tasks.length + " tasks";
      const columns = "minmax(160px, 2fr) minmax(90px, 1fr) 90px 130px 80px 60px";
      const head = h("div", { class: "vhead" }, h("span", {}, "task"), h("span", {}, "family"),
        h("span", {}, replay ? "validated" : "successes"),
        h("span", { "data-sort": "rate", onclick: () => { state.sort = state.sort === "success, low first" ? "success, high first" : "success, low first"; sort.value = state.sort; refresh(); } }, "success rate ↕"),
        h("span", {}, replay ? "" : "Pass@" + (run.meta.k || "k")), h("span", {}, "errors"));
      head.style.gridTemplateColumns = columns;
      listBox.replaceChildren(head, virtualList(tasks, 28, columns, (t) => [
        h("span", { class: "task-id" }, t.task_id), h("span", {}, t.family), h("span", {}, t.c + " / " + t.n),
        h("span", {}, rateBar(t.rate), " ", pct(t.rate)), h("span", {}, replay ? "" : pct(t.pass)),
        h("span", { class: t.errors ? "errored" : "muted" }, t.errors),
      ], (t) => go(taskHash(r, t.task_id))));
    }
    const controls = h("div", { class: "controls" },
      select("family", [["", "every family"], ...families.map((f) => [f, f])]),
      select("outcome", [["", "any outcome"], ["all", "all samples succeeded"], ["some", "some succeeded"], ["none", "none succeeded"]]),
      select("error", [["", "errors or not"], ["with", "with errors"], ["without", "without errors"]]),
      sort, text, count);
    refresh();
    return h("div", {}, h("h3", {}, replay ? "tasks (queries by task)" : "tasks"), controls, listBox);
  }

  function rateBar(rate, negative) {
    const bar = h("span", { class: "bar" + (negative ? " neg" : "") });
    bar.style.width = Math.round(60 * Math.abs(rate || 0)) + "px";
    return bar;
  }

  // ----- episodes: lines of k samples, one episode's turns -------------------------------------

  function episodeLine(r, e) {
    const chips = e.steps.map((s) =>
      h("span", { class: "chip" + (s.valid ? "" : " invalid"), title: s.reply || "" }, s.action === null ? "(no action)" : s.action));
    return h("div", { class: "line", onclick: () => go("#run/" + r + "/episode/" + e.id) },
      h("div", { class: "head" },
        h("div", {}, h("b", {}, "#" + e.sample), " ", outcome(e)),
        h("div", { class: "muted" }, e.turns + " turns" + (e.reward === null ? "" : ", reward " + num(e.reward, 2)) +
          (e.prefix_turns ? ", prefix " + e.prefix_turns : ""))),
      h("div", { class: "chips" },
        (e.prefix_actions || []).map((a) => h("span", { class: "chip prefix" }, a)),
        e.prefix_turns ? h("span", { class: "badge" }, "cut after " + e.prefix_turns) : null, chips));
  }

  // The episodes ``ids`` of run ``r``, one line each; ``grouped``: under a heading per group.
  function linesOf(r, ids, grouped) {
    const box = h("div", { class: "lines" }, h("div", { class: "muted" }, "loading " + ids.length + " episodes..."));
    Promise.all(ids.map((id) => source.episode(r, id)))
      .then((episodes) => box.replaceChildren(...episodes.flatMap((e, i) =>
        grouped && (i === 0 || episodes[i - 1].group_id !== e.group_id)
          ? [h("h3", {}, "group " + e.group_id), episodeLine(r, e)]
          : [episodeLine(r, e)])))
      .catch((err) => problem("could not load the episodes: " + err.message));
    return box;
  }

  function taskView(r, task) {
    const run = data.runs[r];
    const t = run.tasks.find((x) => x.task_id === task);
    if (!t) return h("div", {}, h("p", { class: "note" }, "no task " + task + " in " + run.name));
    return h("div", {},
      h("a", { href: "#run/" + r }, "← " + run.name),
      h("h2", { class: "task-title" }, t.task_id),
      h("div", { class: "muted" }, t.family + ": " + t.c + " of " + t.n + (run.kind === "replay" ? " queries validated" : " succeeded") +
        (t.errors ? ", " + t.errors + " errored" : "") + "; one line per " + (run.kind === "replay" ? "query" : "sample") + ", click one for every turn"),
      linesOf(r, t.episodes));
  }

  function iterationView(r, step) {
    const run = data.runs[r];
    const it = run.training && run.training.iterations.find((x) => x.step === step);
    if (!it) return h("p", { class: "note" }, "no sampled episodes of iteration " + step);
    return h("div", {}, h("a", { href: "#run/" + r }, "← " + run.name),
      h("h2", {}, "iteration " + step + ": " + it.episodes.length + " sampled episodes"),
      h("div", { class: "muted" }, "success " + pct(it.success) + "; the samples of each start under its group"),
      linesOf(r, it.episodes, true));
  }

  function message(m) {
    return h("div", { class: "turn prefix" }, h("div", { class: "label" }, m.role === "assistant" ? "teacher reply" : "observation"), h("pre", {}, m.content));
  }

  // One turn; its answer is shown when the next turn did not start from it (the last turn, or
  // a reply with no action, whose feedback the environment never produced).
  function turnView(s, next) {
    const st = s.logprob_stats;
    const facts = [
      s.valid ? h("span", { class: "won" }, "valid") : h("span", { class: "lost" }, "invalid"),
      s.reward === null ? null : "reward " + num(s.reward, 2),
      s.won === null || s.won === undefined ? null : "won " + s.won,
      s.tokens === null ? null : s.tokens + " tokens",
      st ? "log-prob sum " + num(st.sum, 2) + ", mean " + num(st.mean, 3) + ", min " + num(st.min, 2) : null,
    ].filter(Boolean);
    const fields = s.fields && Object.keys(s.fields).length ? s.fields : null;
    const info = s.info && Object.keys(s.info).length ? s.info : null;
    return h("div", { class: "turn" + (s.valid ? "" : " invalid") },
      h("div", { class: "title" }, "turn " + s.turn + "  ", facts.map((f) => h("span", { class: "badge" }, f))),
      h("div", { class: "label" }, "observation"), h("pre", {}, s.observation),
      s.reply !== null ? [h("div", { class: "label" }, "raw reply"), h("pre", { class: "reply" }, s.reply)] : null,
      h("div", { class: "label" }, "parsed action"),
      h("div", {}, s.action === null ? h("span", { class: "lost" }, "none (the reply had no action)") : h("code", { class: "action" }, s.action)),
      fields ? [h("div", { class: "label" }, "fields"), h("pre", {}, JSON.stringify(fields))] : null,
      info ? [h("div", { class: "label" }, "info"), h("pre", {}, JSON.stringify(info))] : null,
      s.logprobs ? h("details", {}, h("summary", {}, "log-probs of the " + s.logprobs.length + " generated tokens"), h("pre", {}, s.logprobs.map((x) => (x === null ? "-inf" : x.toFixed(3))).join(" "))) : null,
      s.result !== null && (!next || next.observation !== s.result)
        ? [h("div", { class: "label" }, !next ? "last observation" : s.action === null ? "feedback (the environment was not stepped)" : "answer"), h("pre", {}, s.result)]
        : null);
  }

  function episodeView(r, id) {
    const run = data.runs[r];
    const box = h("div", {}, h("p", { class: "muted" }, "loading episode " + id + "..."));
    source.episode(r, id).then((e) => {
      const back = e.part === "train" ? "#run/" + r + "/iteration/" + e.iteration : taskHash(r, e.task_id);
      const metadata = Object.keys(e.metadata || {}).length ? e.metadata : null;
      box.replaceChildren(h("div", {},
        h("a", { href: back }, "← " + (e.part === "train" ? "iteration " + e.iteration : e.task_id)),
        h("h2", { class: "episode-title" }, e.task_id, "  sample #" + e.sample, "  ", outcome(e)),
        h("div", { class: "muted" }, [run.name, "group " + e.group_id, e.turns + " turns", e.reward === null ? null : "reward " + num(e.reward, 2),
          e.tokens === null ? null : e.tokens + " generated tokens", e.protocol ? "protocol " + e.protocol : null, e.agent].filter(Boolean).join(" · ")),
        e.error_message ? h("div", { class: "note" }, e.error_message) : null,
        metadata ? h("details", {}, h("summary", {}, "metadata"), h("pre", {}, JSON.stringify(metadata, null, 1))) : null,
        e.system ? h("details", {}, h("summary", {}, "system prompt"), h("pre", {}, e.system)) : null,
        e.prefix.length ? [h("h3", {}, "teacher prefix (" + e.prefix_turns + " turns)"), e.prefix.map(message),
          h("div", { class: "cut" }, "cut point: after teacher turn " + e.prefix_turns + (e.part === "replay" ? "" : "; the policy plays from here"))] : null,
        e.steps.map((s, i) => turnView(s, e.steps[i + 1])),
        e.steps.length ? null : h("p", { class: "muted" }, "no turns played")));
    }).catch((err) => problem("could not load episode " + id + ": " + err.message));
    return box;
  }

  // ----- two runs compared -----------------------------------------------------------------------

  function comparison(a, b) {
    return data.comparisons.find((c) => c.a === a && c.b === b);
  }

  function compareView(a, b) {
    const pairs = data.comparisons;
    const pick = h("select", { onchange: () => go("#compare/" + pick.value) },
      pairs.map((c) => h("option", { value: c.a + "/" + c.b, selected: c.a === a && c.b === b },
        data.runs[c.b].name + "  vs  " + data.runs[c.a].name)));
    const c = comparison(a, b);
    const head = [h("h2", {}, "compare runs"), h("div", { class: "controls" }, "B vs A: ", pick)];
    if (!c) return h("div", {}, head, h("p", { class: "note" }, "no comparison of runs " + a + " and " + b));
    if (c.refused) return h("div", {}, head, h("div", { class: "refused" }, c.refused));
    const p = c.paired, A = data.runs[a].name, B = data.runs[b].name;
    const chips = (tasks) => tasks.length
      ? h("div", { class: "chips" }, tasks.map((t) => h("a", { class: "chip", href: "#compare/" + a + "/" + b + "/task/" + encodeURIComponent(t) }, t)))
      : h("span", { class: "muted" }, "none");
    const state = { filter: "", sort: "diff" };
    const listBox = h("div");
    function refresh() {
      let tasks = c.tasks.filter((t) => !state.filter || (state.filter === "changed" ? t.diff !== 0 : state.filter === "better" ? t.diff > 0 : t.diff < 0));
      if (state.sort === "diff") tasks = [...tasks].sort((x, y) => Math.abs(y.diff) - Math.abs(x.diff));
      const columns = "minmax(160px, 2fr) minmax(90px, 1fr) 100px 100px 150px";
      const head = h("div", { class: "vhead" }, h("span", {}, "task"), h("span", {}, "family"), h("span", {}, "A: " + A), h("span", {}, "B: " + B), h("span", {}, "B − A"));
      head.style.gridTemplateColumns = columns;
      listBox.replaceChildren(head, virtualList(tasks, 28, columns, (t) => [
        h("span", {}, t.task_id), h("span", {}, t.family), h("span", {}, t.a[0] + " / " + t.a[1]), h("span", {}, t.b[0] + " / " + t.b[1]),
        h("span", {}, rateBar(t.diff, t.diff < 0), " ", signed(t.diff, 2)),
      ], (t) => go("#compare/" + a + "/" + b + "/task/" + encodeURIComponent(t.task_id))));
    }
    const filter = h("select", { onchange: () => { state.filter = filter.value; refresh(); } },
      [["", "every shared task"], ["changed", "success rate changed"], ["better", "B better"], ["worse", "B worse"]].map(([v, l]) => h("option", { value: v }, l)));
    const sort = h("select", { onchange: () => { state.sort = sort.value; refresh(); } },
      [["diff", "largest difference first"], ["order", "task order"]].map(([v, l]) => h("option", { value: v }, l)));
    refresh();
    return h("div", {}, head,
      h("div", { class: "muted" }, "A = " + A + ", B = " + B + "; per task the success rate (successes / samples) of each, and B − A"),
      h("p", {}, h("span", { class: "stat paired" }, "paired difference " + signed(p.mean_diff) + " ± " + num(p.se)),
        h("span", { class: "muted" }, "  (SE over " + p.pairs + " tasks; z " + num(p.z, 2) + "; B better on " + p.better + ", worse on " + p.worse + ")")),
      c.notes.map((n) => h("div", { class: "note" }, n)),
      h("h3", {}, "flipped to solved in B (no success in A): " + c.fixed.length), chips(c.fixed),
      h("h3", {}, "flipped to unsolved in B (no success in B): " + c.broken.length), chips(c.broken),
      h("h3", {}, "tasks"), h("div", { class: "controls" }, filter, sort), listBox);
  }

  function compareTaskView(a, b, task) {
    const c = comparison(a, b);
    const t = c && c.tasks && c.tasks.find((x) => x.task_id === task);
    if (!t) return h("p", { class: "note" }, "task " + task + " is not shared by the two runs");
    const column = (r, ids, cn) => h("div", {},
      h("h3", {}, data.runs[r].name + ": " + cn[0] + " / " + cn[1]), linesOf(r, ids));
    return h("div", {}, h("a", { href: "#compare/" + a + "/" + b }, "← comparison"),
      h("h2", { class: "task-title" }, task),
      h("div", { class: "muted" }, t.family + "; B − A = " + signed(t.diff, 2)),
      h("div", { class: "side" }, column(a, t.episodes_a, t.a), column(b, t.episodes_b, t.b)));
  }

  // ----- routing and start ------------------------------------------------------------------------

  function tabs(active) {
    const links = data.runs.map((run, i) =>
      h("a", { href: "#run/" + i, class: active === "run/" + i ? "active" : null }, run.name));
    if (data.comparisons.length) {
      const first = data.comparisons[0];
      links.push(h("a", { href: "#compare/" + first.a + "/" + first.b, class: active === "compare" ? "active" : null }, "compare"));
    }
    document.getElementById("tabs").replaceChildren(...links);
  }

  function route() {
    problem(null);
    const parts = location.hash.replace(/^#/, "").split("/");
    const int = (x) => Number.parseInt(x, 10);
    let view;
    if (parts[0] === "compare" && parts.length >= 3) {
      tabs("compare");
      const [a, b] = [int(parts[1]), int(parts[2])];
      view = parts[3] === "task" ? compareTaskView(a, b, decodeURIComponent(parts.slice(4).join("/"))) : compareView(a, b);
    } else {
      const r = parts[0] === "run" && int(parts[1]) < data.runs.length ? int(parts[1]) : 0;
      tabs("run/" + r);
      if (parts[2] === "task") view = taskView(r, decodeURIComponent(parts.slice(3).join("/")));
      else if (parts[2] === "episode") view = episodeView(r, int(parts[3]));
      else if (parts[2] === "iteration") view = iterationView(r, int(parts[3]));
      else view = runView(r);
    }
    app.replaceChildren(view);
    window.scrollTo(0, 0);
  }

  async function start() {
    const inline = document.getElementById("agentenvs-data");
    source = inline ? inlineSource(inline, document.getElementById("agentenvs-episodes")) : serverSource();
    document.getElementById("source").textContent = source.label;
    try {
      data = await source.index();
    } catch (err) {
      app.replaceChildren();
      problem("could not load the runs: " + err.message);
      return;
    }
    window.addEventListener("hashchange", route);
    route();
    requestAnimationFrame(() => {
      window.agentenvsReadyMs = performance.now();
      document.body.dataset.ready = "1";
    });
  }

  start();
})();
