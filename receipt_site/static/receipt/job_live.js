/* Live refresh of the job page (U-2). Follows the job's SSE stream (/jobs/<id>/events,
   E-1) and on each `job-refresh` re-fetches this page and swaps the [data-live] sections
   in place, at most once a second. When EventSource fails (no ASGI server, a proxy that
   buffers, a dropped session) it polls the page every 5 s and tries the stream again
   with backoff. No framework, no CDN. */
(function () {
  "use strict";
  var root = document.getElementById("rcpt-job");
  if (!root) { return; }
  var statusEl = document.getElementById("rcpt-live-status");
  var MIN_GAP_MS = 1000, POLL_MS = 5000;
  var lastFetch = 0, timer = null, inflight = false, again = false;
  var source = null, pollTimer = null, retryMs = 15000;

  function say(text) { if (statusEl) { statusEl.textContent = text; } }

  function openKeys(el) {
    var keys = {};
    el.querySelectorAll("details[data-key]").forEach(function (d) { keys[d.getAttribute("data-key")] = d.open; });
    return keys;
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-live]").forEach(function (el) {
      var fresh = doc.getElementById(el.id);
      if (!fresh) { return; }
      var keys = openKeys(el);
      el.innerHTML = fresh.innerHTML;
      el.querySelectorAll("details[data-key]").forEach(function (d) {
        var key = d.getAttribute("data-key");
        if (Object.prototype.hasOwnProperty.call(keys, key)) { d.open = keys[key]; }
      });
    });
    var status = doc.getElementById("rcpt-job-status");
    var mine = document.getElementById("rcpt-job-status");
    if (status && mine) { mine.innerHTML = status.innerHTML; }
  }

  function refresh() {
    var wait = lastFetch + MIN_GAP_MS - Date.now();
    if (wait > 0) {
      if (!timer) { timer = setTimeout(function () { timer = null; refresh(); }, wait); }
      return;
    }
    if (inflight) { again = true; return; }
    inflight = true;
    lastFetch = Date.now();
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) { swap(html); })
      .catch(function (e) { say("refresh failed (" + e.message + "); retrying"); })
      .then(function () {
        inflight = false;
        if (again) { again = false; refresh(); }
      });
  }

  function startPolling() {
    if (pollTimer) { return; }
    say("live stream unavailable: polling every 5 s");
    pollTimer = setInterval(function () { if (!document.hidden) { refresh(); } }, POLL_MS);
  }

  function stopPolling() {
    if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
  }

  function connect() {
    if (!window.EventSource) { startPolling(); return; }
    source = new EventSource(root.getAttribute("data-events-url"));
    source.addEventListener("job-refresh", function () {
      // "init" too: receipts may have landed between this page's render and the connect.
      stopPolling();
      retryMs = 15000;
      say("live");
      refresh();
    });
    source.onerror = function () {
      if (source.readyState === EventSource.CONNECTING) { say("reconnecting…"); return; }
      source.close();  // a refused stream (401, 501 under WSGI, 204 at the end) stays closed
      startPolling();
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 300000);
    };
  }

  if (root.getAttribute("data-terminal") === "1") { return; }  // a settled job does not change
  connect();
})();
