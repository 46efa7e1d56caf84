/* Live refresh of the job page. Follows the job's SSE stream (/jobs/<id>/events) and on
   each `job-refresh` re-fetches this page and swaps the [data-live] sections in place, at
   most once a second. When EventSource fails (no ASGI server, a proxy that buffers, a
   dropped session) it polls the page every 5 s and tries the stream again with backoff.
   Once the job is settled (completed, failed, canceled: the stream's `job` event says so,
   or a fetched page does) it fetches the page one last time, also swapping the
   [data-settle] sections (the actions), and stops: no stream, no polling. No framework,
   no CDN. */
(function () {
  "use strict";
  var root = document.getElementById("rcpt-job");
  if (!root) { return; }
  var statusEl = document.getElementById("rcpt-live-status");
  var MIN_GAP_MS = 1000, POLL_MS = 5000;
  var TERMINAL = { completed: true, failed: true, canceled: true };
  var lastFetch = 0, timer = null, inflight = false, again = false;
  var source = null, pollTimer = null, retryTimer = null, retryMs = 15000;
  var settling = false, settled = false;

  function say(text) { if (statusEl) { statusEl.textContent = text; } }

  function openKeys(el) {
    var keys = {};
    el.querySelectorAll("details[data-key]").forEach(function (d) { keys[d.getAttribute("data-key")] = d.open; });
    return keys;
  }

  function swapAll(doc, selector) {
    document.querySelectorAll(selector).forEach(function (el) {
      var fresh = doc.getElementById(el.id);
      // An unchanged section keeps its nodes: replacing them under the pointer would turn a
      // click that lands mid-swap into a click on nothing.
      if (!fresh || fresh.innerHTML === el.innerHTML) { return; }
      var keys = openKeys(el);
      el.innerHTML = fresh.innerHTML;
      el.querySelectorAll("details[data-key]").forEach(function (d) {
        var key = d.getAttribute("data-key");
        if (Object.prototype.hasOwnProperty.call(keys, key)) { d.open = keys[key]; }
      });
    });
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var terminal = (doc.getElementById("rcpt-job") || root).getAttribute("data-terminal") === "1";
    swapAll(doc, terminal ? "[data-live], [data-settle]" : "[data-live]");
    var status = doc.getElementById("rcpt-job-status");
    var mine = document.getElementById("rcpt-job-status");
    if (status && mine) { mine.innerHTML = status.innerHTML; }
    return terminal;
  }

  function stopAll() {
    if (source) { source.close(); source = null; }
    if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
    if (retryTimer) { clearTimeout(retryTimer); retryTimer = null; }
  }

  function finish() {
    settled = true;
    stopAll();
    if (timer) { clearTimeout(timer); timer = null; }
    root.setAttribute("data-terminal", "1");
    say("settled: live refresh off");
  }

  function settle() {
    // The job reached a terminal state: nothing more can happen to it.
    if (settling || settled) { return; }
    settling = true;
    stopAll();
    say("settled: loading the final state…");
    again = false;
    refresh();
  }

  function refresh() {
    if (settled) { return; }
    var wait = lastFetch + MIN_GAP_MS - Date.now();
    if (wait > 0) {
      if (!timer) { timer = setTimeout(function () { timer = null; refresh(); }, wait); }
      return;
    }
    if (inflight) { again = true; return; }
    inflight = true;
    root.setAttribute("aria-busy", "true");
    lastFetch = Date.now();
    var last = settling;  // started after the job settled: the page's final state
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) { if (swap(html) || last) { finish(); } })
      .catch(function (e) {
        if (last) { finish(); say("settled: live refresh off (reload the page for its final state)"); return; }
        say("refresh failed (" + e.message + "); retrying");
      })
      .then(function () {
        inflight = false;
        root.removeAttribute("aria-busy");
        if (again && !settled) { again = false; refresh(); }
      });
  }

  function startPolling() {
    if (pollTimer || settling || settled) { return; }
    say("live stream unavailable: polling every 5 s");
    pollTimer = setInterval(function () { if (!document.hidden) { refresh(); } }, POLL_MS);
  }

  function stopPolling() {
    if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
  }

  function connect() {
    retryTimer = null;
    if (settling || settled) { return; }
    if (!window.EventSource) { startPolling(); return; }
    source = new EventSource(root.getAttribute("data-events-url"));
    source.addEventListener("job-refresh", function () {
      // "init" too: receipts may have landed between this page's render and the connect.
      stopPolling();
      retryMs = 15000;
      say("live");
      refresh();
    });
    source.addEventListener("job", function (event) {
      var job = null;
      try { job = JSON.parse(event.data); } catch (e) { return; }
      if (job && TERMINAL[job.status]) { settle(); }
    });
    source.onerror = function () {
      if (settling || settled) { stopAll(); return; }
      if (source.readyState === EventSource.CONNECTING) { say("reconnecting…"); return; }
      source.close();  // a refused stream (401, 501 under WSGI, 204 at the end) stays closed
      source = null;
      startPolling();
      retryTimer = setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 300000);
    };
  }

  if (root.getAttribute("data-terminal") === "1") { return; }  // a settled job does not change
  connect();
})();
