/* Live dashboard (U-6): polls the JSON snapshot every 3 s and redraws each table marked
   data-source (a dotted path in the snapshot) with the column keys and formats of its
   header cells, and the settled-per-minute chart. The formats mirror format_cell in
   jobs/dashboard_tables.py, the chart jobs/core/settled_chart.py. Text only: no innerHTML
   from data. */
(function () {
  "use strict";
  var root = document.getElementById("rcpt-dashboard");
  if (!root) { return; }
  var url = root.getAttribute("data-json-url");
  var jobBase = root.getAttribute("data-job-url");
  var statusEl = document.getElementById("rcpt-live-status");
  var EVERY_MS = 3000;

  function pick(data, path) {
    return path.split(".").reduce(function (v, k) { return v && typeof v === "object" ? v[k] : undefined; }, data);
  }

  function pad(n, w) { n = String(n); while (n.length < (w || 2)) { n = "0" + n; } return n; }

  function utc(ms) {
    var d = new Date(ms);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()) + "." +
      pad(d.getUTCMilliseconds(), 3) + " UTC";
  }

  function human(ms) {
    ms = Math.max(0, Math.floor(ms));
    if (ms < 1000) { return ms + " ms"; }
    var s = Math.floor(ms / 1000);
    if (s < 60) { return (ms / 1000).toFixed(1) + " s"; }
    var m = Math.floor(s / 60); s = s % 60;
    if (m < 60) { return m + "m " + pad(s) + "s"; }
    var h = Math.floor(m / 60); m = m % 60;
    if (h < 24) { return h + "h " + pad(m) + "m"; }
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }

  function span(cls, text, title) {
    var el = document.createElement("span");
    if (cls) { el.className = cls; }
    el.textContent = text;
    if (title) { el.title = title; }
    return el;
  }

  function usage(busy, slots, shown) {
    shown = shown || String(busy);  // the busy count as text, "1,000+" when capped
    var out = document.createElement("span");
    var bar = span("rcpt-usage" + (busy > slots ? " rcpt-usage-over" : ""), "", shown + " busy of " + slots + " slots");
    var fill = span("rcpt-usage-fill", "");
    fill.style.width = (slots === 0 ? (busy ? 100 : 0) : Math.min(100, Math.round(100 * busy / slots))) + "%";
    bar.appendChild(fill);
    out.appendChild(bar);
    out.appendChild(document.createTextNode(" " + shown + " / " + slots));
    return out;
  }

  function cell(value, format, now, row) {
    if (format === "len") { return document.createTextNode(String((value || []).length)); }
    if (format === "usage") { return usage(value || 0, (row && row.slots) || 0, row && row.busyShown); }
    if (value === null || value === undefined || value === "") { return span("rcpt-none", "—"); }
    switch (format) {
      case "num": return document.createTextNode(typeof value === "number" && Number.isInteger(value) ? value.toLocaleString("en-US") : String(value));
      case "status": return span("rcpt-job-badge rcpt-job-badge-" + value, value);
      case "utc": return span("", utc(value), String(value));
      case "ms": return document.createTextNode(human(value));
      case "ago": return span("", human(now - value) + " ago", utc(value));
      case "live": return span("rcpt-job-badge rcpt-job-badge-" + (value ? "live" : "gone"), value ? "live" : "gone");
      case "job": {
        var a = document.createElement("a");
        a.href = jobBase + encodeURIComponent(adminQuote(value)) + "/change/";
        var code = document.createElement("code"); code.textContent = value; a.appendChild(code);
        return a;
      }
      case "jobs": {
        var list = document.createElement("span");
        value.forEach(function (id, i) {
          if (i) { list.appendChild(document.createTextNode(", ")); }
          list.appendChild(cell(id, "job", now));
        });
        return list;
      }
      default: return document.createTextNode(String(value));
    }
  }

  // django.contrib.admin.utils.quote: the admin's escaping of primary keys in URLs.
  function adminQuote(value) {
    return String(value).replace(/[:\/_#?;@&=+$,"\[\]<>%\n\\]/g, function (c) {
      return "_" + pad(c.charCodeAt(0).toString(16).toUpperCase());
    });
  }

  function redraw(table, rows, now) {
    var heads = table.querySelectorAll("thead th");
    var body = document.createElement("tbody");
    (rows || []).forEach(function (row) {
      var tr = document.createElement("tr");
      heads.forEach(function (th) {
        var td = document.createElement("td");
        var format = th.getAttribute("data-format");
        td.className = "rcpt-f-" + format;
        td.appendChild(cell(row[th.getAttribute("data-key")], format, now, row));
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    if (!rows || !rows.length) {
      var tr = document.createElement("tr"); tr.className = "rcpt-empty";
      var td = document.createElement("td"); td.colSpan = heads.length; td.className = "rcpt-none";
      td.textContent = table.getAttribute("data-empty"); tr.appendChild(td); body.appendChild(tr);
    }
    table.replaceChild(body, table.querySelector("tbody"));
  }

  var SVG = "http://www.w3.org/2000/svg";
  var STACK = ["failed", "completed", "canceled"];  // bottom to top

  function svgEl(name, attrs) {
    var el = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, String(attrs[k])); });
    return el;
  }

  function round2(x) { return Math.round(x * 100) / 100; }

  function drawChart(svg, chart) {
    var buckets = chart && chart.buckets;
    if (!svg || !buckets) { return; }
    var width = svg.viewBox.baseVal.width;
    var baseline = Number(svg.getAttribute("data-baseline"));
    var plot = baseline - Number(svg.getAttribute("data-top"));
    var totals = buckets.map(function (b) { return STACK.reduce(function (t, s) { return t + (b[s] || 0); }, 0); });
    var peak = Math.max.apply(null, totals.concat([1]));
    var step = width / Math.max(buckets.length, 1);
    var group = svgEl("g", { id: "rcpt-chart-bars" });
    buckets.forEach(function (b, i) {
      var x = round2(i * step + 1), w = round2(Math.max(step - 2, 1)), base = baseline;
      var minute = svgEl("g", { "class": "rcpt-chart-minute" });
      var title = svgEl("title", {});
      title.textContent = utc(b.at).slice(11, 16) + " UTC: " +
        STACK.map(function (s) { return (b[s] || 0) + " " + s; }).join(", ");
      minute.appendChild(title);
      minute.appendChild(svgEl("rect", { "class": "rcpt-chart-hit", x: x, y: 0, width: w, height: baseline }));
      STACK.forEach(function (s) {
        if (!b[s]) { return; }
        var h = round2(b[s] * plot / peak);
        base = round2(base - h);
        minute.appendChild(svgEl("rect", { "class": "rcpt-bar-" + s, x: x, y: base, width: w, height: h }));
      });
      group.appendChild(minute);
    });
    svg.replaceChild(group, svg.querySelector("#rcpt-chart-bars"));
    document.getElementById("rcpt-chart-peak").textContent = String(peak);
  }

  function apply(data) {
    drawChart(document.getElementById("rcpt-chart"), data.settledPerMinute);
    root.querySelectorAll("table[data-source]").forEach(function (table) {
      redraw(table, pick(data, table.getAttribute("data-source")), data.now);
    });
    root.querySelectorAll("[data-field]").forEach(function (el) {
      var value = pick(data, el.getAttribute("data-field"));
      if (value === undefined) { return; }
      var format = el.getAttribute("data-format");
      el.textContent = format === "utc" ? utc(value) : format === "ms" ? human(value) : (typeof value === "number" ? value.toLocaleString("en-US") : String(value));
    });
  }

  function tick() {
    if (document.hidden) { setTimeout(tick, EVERY_MS); return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (data) {
        apply(data);
        root.classList.remove("rcpt-stale");
        if (statusEl) { statusEl.textContent = "refreshing every 3 s"; }
      })
      .catch(function (e) {
        root.classList.add("rcpt-stale");
        if (statusEl) { statusEl.textContent = "refresh failed (" + e.message + "); retrying"; }
      })
      .then(function () { setTimeout(tick, EVERY_MS); });
  }

  setTimeout(tick, EVERY_MS);
})();
