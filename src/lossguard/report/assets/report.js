/* lossguard HTML report: draws the JSON in #lossguard-data with the embedded plotly.js.
 * Charts share one x axis (steps): zooming one zooms all, and each chart fits its y axis to what is
 * visible, so a spike you zoom into fills the chart. window.lossguardReport is the test hook. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("lossguard-data").textContent);
  var LINE = "#1f4e79", VAL = "#2e7d32", NAN = "#6a1b9a";
  var charts = [];          // {gd, spec}
  var syncing = false;
  var current = null;       // visible x range, null = whole run

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function kind(k) { return data.kinds[k] || { label: k, colour: "#888" }; }

  // ---- header legend: only what is on the page -------------------------------------------------
  function legend() {
    var box = document.getElementById("legend");
    function item(swatchClass, colour, text) {
      var s = el("span", { "class": "item" });
      var w = el("span", { "class": "swatch " + swatchClass });
      if (colour) w.style.background = colour;
      s.appendChild(w); s.appendChild(document.createTextNode(text)); box.appendChild(s);
    }
    item("line", LINE, "live curve");
    var dead = data.charts.some(function (c) { return c.traces.some(function (t) { return t.role === "dead"; }); });
    if (dead) item("line", "rgba(31,78,121,0.3)", "superseded by a rollback (faded)");
    if (data.charts.some(function (c) { return c.traces.some(function (t) { return t.role === "val"; }); }))
      item("line", VAL, "validation loss");
    var kinds = {};
    data.segments.forEach(function (s) { kinds[s.kind] = true; });
    if (kinds.resume) item("vline", null, "resume");
    if (kinds.rollback) item("vline rollback", null, "rollback");
    Object.keys(data.kinds).forEach(function (k) { item("", kind(k).colour, kind(k).label); });
    if (data.charts.some(function (c) { return c.traces.some(function (t) { return t.role === "nonfinite"; }); }))
      item("", NAN, "\u2716 NaN/Inf point");
    if (data.incidents.length) item("", null, "\u25CB onset  \u25C6 peak");
  }

  // ---- the incident list ------------------------------------------------------------------------
  function incidentList() {
    var list = document.getElementById("incident-list");
    document.getElementById("incident-count").textContent =
      data.incidents.length ? "Incidents (" + data.incidents.length + ")" : "Incidents";
    if (!data.incidents.length) {
      list.appendChild(el("li", { "class": "none" }, "None found. The run looks healthy."));
      return;
    }
    // With many incidents, the routine ones (severity info) show their details only when selected.
    var compact = data.incidents.length > 5;
    data.incidents.forEach(function (inc) {
      var cls = "incident" + (compact && inc.severity === "info" ? " compact" : "");
      var li = el("li", { "class": cls, "data-index": inc.index, "tabindex": "0" });
      li.style.setProperty("--kind", kind(inc.kind).colour);
      var what = el("div", { "class": "what" }, inc.summary);
      what.appendChild(el("span", { "class": "badge " + inc.severity }, inc.severity));
      li.appendChild(what);
      var end = inc.end === null ? "never recovered" : "back at " + inc.end;
      li.appendChild(el("div", { "class": "where" },
        "#" + inc.index + " \u00b7 " + inc.metric + " \u00b7 onset " + inc.onset + " \u00b7 peak " + inc.peak + " \u00b7 " + end));
      var more = el("div", { "class": "details" });
      li.appendChild(more);
      if (inc.evidence) more.appendChild(el("div", { "class": "evidence" }, inc.evidence));
      inc.plan.forEach(function (p) {
        var d = el("div", { "class": "plan" });
        d.appendChild(el("b", {}, "Plan: ")); d.appendChild(document.createTextNode(p));
        more.appendChild(d);
      });
      if (inc.suspects && inc.suspects.length) {
        var sd = el("div", { "class": "suspects" });
        sd.appendChild(el("b", {}, "Samples named: "));
        var sl = el("ul", { "class": "reasons" });
        inc.suspects.forEach(function (t) { sl.appendChild(el("li", {}, t)); });
        sd.appendChild(sl);
        more.appendChild(sd);
      }
      if (inc.reasons.length) {
        var ul = el("ul", { "class": "reasons" });
        inc.reasons.forEach(function (r) { ul.appendChild(el("li", {}, r)); });
        more.appendChild(ul);
      }
      li.addEventListener("click", function () { select(inc.index, true); });
      li.addEventListener("keydown", function (e) { if (e.key === "Enter") select(inc.index, true); });
      list.appendChild(li);
    });
  }

  function select(index, zoom) {
    document.querySelectorAll("li.incident").forEach(function (li) {
      li.classList.toggle("selected", Number(li.dataset.index) === index);
    });
    var inc = data.incidents[index];
    var li = document.querySelector('li.incident[data-index="' + index + '"]');
    if (li && li.scrollIntoView) li.scrollIntoView({ block: "nearest" });
    if (zoom) return setRange(inc.zoom);
  }

  // ---- charts -------------------------------------------------------------------------------------
  function shapes(first) {
    var out = [], notes = [];
    data.incidents.forEach(function (inc) {
      out.push({ type: "rect", xref: "x", yref: "paper", x0: inc.span[0], x1: inc.span[1], y0: 0, y1: 1,
                 fillcolor: kind(inc.kind).colour, opacity: { critical: 0.22, warning: 0.16 }[inc.severity] || 0.09,
                 line: { width: 0 }, layer: "below" });
    });
    data.segments.forEach(function (s) {
      var rb = s.kind === "rollback";
      out.push({ type: "line", xref: "x", yref: "paper", x0: s.step, x1: s.step, y0: 0, y1: 1,
                 line: { color: rb ? "#c62828" : "#555", width: 1.3, dash: "dash" } });
      if (first) notes.push({ x: s.step, y: 1, xref: "x", yref: "paper", yanchor: "bottom", showarrow: false,
                              font: { size: 11, color: rb ? "#c62828" : "#555" },
                              text: rb ? "rollback to " + s.step : "resume at " + s.step });
    });
    return { shapes: out, annotations: notes };
  }

  var GUARD = { skip: "#ef6c00", rollback: "#c62828", lr_cut: "#1565c0", loss_scale_reset: "#4527a0", halt: "#000" };

  // The guard's decisions on the same timeline: one row per kind of action.
  function guardSpec() {
    var rows = [];
    data.guard.forEach(function (g) { if (rows.indexOf(g.event) < 0) rows.push(g.event); });
    return { metric: "guard", title: "Guard actions", guard: true, log: false, rows: rows,
             traces: rows.map(function (r) {
               var gs = data.guard.filter(function (g) { return g.event === r; });
               return { role: "guard", name: r, x: gs.map(function (g) { return g.step; }),
                        y: gs.map(function () { return r; }),
                        text: gs.map(function (g) { return r + " at " + g.step + (g.text ? " (" + g.text + ")" : ""); }) };
             }) };
  }

  function trace(t, spec) {
    var unit = "<extra>" + t.name + "</extra>";
    var base = { type: "scatter", x: t.x, y: t.y, name: t.name, meta: t.role, cliponaxis: false };
    if (t.role === "live")
      return Object.assign(base, { mode: "lines", line: { color: LINE, width: 1.2 }, hovertemplate: "%{y:.5g}" + unit });
    if (t.role === "dead")
      return Object.assign(base, { mode: "lines", line: { color: LINE, width: 1 }, opacity: 0.28,
                                   connectgaps: false, hovertemplate: "%{y:.5g}" + unit });
    if (t.role === "val")
      return Object.assign(base, { mode: "lines+markers", line: { color: VAL, width: 1.2 },
                                   marker: { size: 4 }, hovertemplate: "%{y:.5g}" + unit });
    if (t.role === "guard")
      return Object.assign(base, { mode: "markers", text: t.text, hovertemplate: "%{text}<extra></extra>",
                                   marker: { symbol: "diamond", size: 10, color: GUARD[t.name] || "#555" } });
    if (t.role === "nonfinite")
      return Object.assign(base, { mode: "markers", text: t.text, hovertemplate: "%{text}<extra></extra>",
                                   marker: { symbol: "x", size: 9, color: NAN } });
    // incident markers: hollow circle at the onset, filled diamond at the peak
    var inc = t.incident.map(function (i) { return data.incidents[i]; });
    return Object.assign(base, {
      mode: "markers", customdata: t.incident,
      text: inc.map(function (d, j) { return t.point[j] + " of " + d.summary; }),
      hovertemplate: "%{text}<extra></extra>",
      marker: { size: t.point.map(function (p) { return p === "peak" ? 11 : 12; }),
                symbol: t.point.map(function (p) { return p === "peak" ? "diamond" : "circle-open"; }),
                color: inc.map(function (d) { return kind(d.kind).colour; }),
                line: { width: 2, color: inc.map(function (d) { return kind(d.kind).colour; }) } } });
  }

  // The y range that shows every drawn point of the curves inside [x0, x1] (null = no point there).
  // Whole-run view (range null): loss charts skip their warm-up (spec.fit_after), except markers.
  function fitY(gd, range, log, fitAfter) {
    var lo = Infinity, hi = -Infinity;
    gd.data.forEach(function (t) {
      if (t.meta === "nonfinite" || t.meta === "guard") return;
      var from = range ? range[0] : (t.meta === "incident" || fitAfter === null ? -Infinity : fitAfter);
      var to = range ? range[1] : Infinity;
      for (var i = 0; i < t.x.length; i++) {
        var x = t.x[i], y = t.y[i];
        if (x === null || y === null || x < from || x > to) continue;
        if (log && y <= 0) continue;
        if (y < lo) lo = y; if (y > hi) hi = y;
      }
    });
    if (!(hi >= lo)) return null;
    if (log) { lo = Math.log10(lo); hi = Math.log10(hi); }
    var pad = (hi - lo) * 0.06 || Math.abs(hi) * 0.05 || 0.5;
    return [lo - pad, hi + pad];
  }

  function yUpdate(c, range) {
    if (c.spec.guard) return {};
    var r = fitY(c.gd, range, c.log, c.spec.fit_after === undefined ? null : c.spec.fit_after);
    return r ? { "yaxis.range": r, "yaxis.autorange": false } : { "yaxis.autorange": true };
  }

  function setRange(range, source, keepY) {
    current = range;
    syncing = true;
    var jobs = charts.map(function (c) {
      var upd = range ? { "xaxis.range": range.slice(), "xaxis.autorange": false }
                      : { "xaxis.range": data.range.slice(), "xaxis.autorange": false };
      if (!(keepY && c.gd === source)) Object.assign(upd, yUpdate(c, range));
      return Plotly.relayout(c.gd, upd);
    });
    return Promise.all(jobs).then(function () {
      syncing = false;
      document.body.dataset.xrange = range ? range.join(",") : "all";
    }, function (e) { syncing = false; throw e; });
  }

  function onRelayout(gd, ev) {
    if (syncing) return;
    var r = null;
    if ("xaxis.range[0]" in ev) r = [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
    else if (ev["xaxis.range"]) r = ev["xaxis.range"];
    else if (!ev["xaxis.autorange"]) return;
    // A double-click resets to the initial range, which is the whole run: treat it as "Whole run".
    var whole = !r || (Number(r[0]) === data.range[0] && Number(r[1]) === data.range[1]);
    var keepY = !whole && "yaxis.range[0]" in ev;  // the user box-zoomed y too: respect it on that chart
    setRange(whole ? null : r, gd, keepY);
  }

  function chart(spec, i) {
    var card = el("div", { "class": "chart-card" });
    var head = el("div", { "class": "chart-head" });
    head.appendChild(el("span", {}, spec.title));
    var label = el("label", {});
    var box = el("input", { type: "checkbox", "class": "logtoggle", "data-metric": spec.metric });
    box.checked = spec.log;
    label.appendChild(box); label.appendChild(document.createTextNode(" log scale"));
    if (!spec.guard) head.appendChild(label);
    var gd = el("div", { "class": "chart", id: "chart-" + i, "data-metric": spec.metric });
    card.appendChild(head); card.appendChild(gd);
    document.getElementById("charts").appendChild(card);
    var c = { gd: gd, spec: spec, log: spec.log };
    charts.push(c);

    var sh = shapes(i === 0);
    var single = data.charts.length === 1;
    var height = spec.guard ? 46 + 26 * spec.rows.length : (i === 0 ? (single ? 460 : 330) : 210);
    var yaxis = { type: spec.log ? "log" : "linear", zeroline: false, gridcolor: "#eef0f2", exponentformat: "e" };
    // Log axes: ticks at 1, 2, 5 x 10^k (no crowd of minor labels); the loss scale at powers of two.
    c.logAxis = spec.metric === "loss_scale" ? { dtick: Math.log10(2), tick0: 0, tickformat: "d" }
                                             : { dtick: "D2", tick0: null, tickformat: null };
    if (spec.log) Object.assign(yaxis, c.logAxis);
    if (spec.guard) yaxis = { type: "category", categoryorder: "array", categoryarray: spec.rows.slice().reverse(),
                              gridcolor: "#eef0f2", fixedrange: true };
    var layout = {
      height: height, margin: { l: 82, r: 16, t: i === 0 ? 20 : 8, b: 28 },
      showlegend: false, hovermode: "x unified", dragmode: "zoom",
      xaxis: { range: data.range.slice(), showspikes: true, spikemode: "across", spikethickness: 1,
               spikecolor: "#999", zeroline: false, gridcolor: "#eef0f2", hoverformat: "d", tickformat: "d" },
      yaxis: yaxis,
      shapes: sh.shapes, annotations: sh.annotations, plot_bgcolor: "#fff", paper_bgcolor: "#fff",
      font: { family: "system-ui, sans-serif", size: 11.5 }
    };
    var config = { displaylogo: false, responsive: true, scrollZoom: false,
                   modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d"] };
    var traces = spec.traces.map(function (t) { return trace(t, spec); });
    return Plotly.newPlot(gd, traces, layout, config).then(function () {
      gd.on("plotly_relayout", function (ev) { onRelayout(gd, ev); });
      gd.on("plotly_click", function (ev) {
        var p = ev.points && ev.points[0];
        if (p && p.data.meta === "incident") select(p.customdata, true);
      });
      box.addEventListener("change", function () {
        c.log = box.checked;
        var upd = { "yaxis.type": c.log ? "log" : "linear" };
        ["dtick", "tick0", "tickformat"].forEach(function (k) { upd["yaxis." + k] = c.log ? c.logAxis[k] : null; });
        Plotly.relayout(gd, Object.assign(upd, yUpdate(c, current)));
      });
    });
  }

  legend();
  incidentList();
  document.getElementById("show-all").addEventListener("click", function () {
    document.querySelectorAll("li.incident.selected").forEach(function (li) { li.classList.remove("selected"); });
    setRange(null);
  });
  var specs = data.charts.slice();
  if (data.guard.length) specs.splice(1, 0, guardSpec());  // right under the loss
  Promise.all(specs.map(chart)).then(function () {
    return setRange(null);
  }).then(function () {
    document.body.dataset.ready = "1";
  });
  window.lossguardReport = { data: data, charts: charts, setRange: setRange, select: select };
})();
