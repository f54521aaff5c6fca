// The operator console's own script: toasts for htmx's events, and the few buttons that act in the
// page. Served as a file: the Content-Security-Policy allows no inline script or event handler.
(function () {
  "use strict";
  var flash = document.getElementById("flash");
  function show(level, text) {
    var box = document.createElement("div");
    box.className = "alert " + (level || "info");
    box.setAttribute("role", "status");
    box.textContent = text;
    flash.appendChild(box);
    setTimeout(function () { box.remove(); }, level === "error" ? 12000 : 6000);
  }
  document.body.addEventListener("ops:message", function (e) { show(e.detail.level, e.detail.text); });
  document.body.addEventListener("htmx:responseError", function (e) {
    var status = e.detail.xhr.status;
    show("error", status === 403 ? "You are not allowed to do that." : status === 404 ? "Not found: it may have been removed." : status === 429 ? "Too many requests: wait a moment." : "The server answered " + status + ".");
  });
  var offline = false;
  document.body.addEventListener("htmx:sendError", function () {
    if (!offline) { offline = true; show("error", "The server could not be reached; live updates resume when it is back."); }
  });
  document.body.addEventListener("htmx:afterRequest", function (e) { if (e.detail.successful) offline = false; });

  // Delegated, so that rows and panels swapped in by htmx work too.
  document.addEventListener("click", function (e) {
    var target = e.target;
    if (!(target instanceof Element)) return;
    var pickAll = target.closest("[data-pick-all]");
    if (pickAll) {
      // Tick or untick every row of the form the checkbox names.
      document.querySelectorAll("input[name=step][form=" + pickAll.getAttribute("data-pick-all") + "]").forEach(function (box) {
        box.checked = pickAll.checked;
      });
      return;
    }
    var clear = target.closest("[data-clear]");
    if (clear) {
      var panel = document.getElementById(clear.getAttribute("data-clear"));
      if (panel) panel.innerHTML = "";
    }
  });
})();
