// The page's notices, with no inline script (the Content-Security-Policy allows none):
// #banner says a live refresh failed (the database or this server is away) and clears at
// the next refresh that succeeds; #notice says an action failed and stays until the next
// action succeeds. The text is set as text, never parsed as HTML.
(function () {
  "use strict";

  function element(id) {
    return document.getElementById(id);
  }

  function show(id, text) {
    var target = element(id);
    if (!target) return;
    target.textContent = text;
    target.hidden = false;
  }

  function clear(id) {
    var target = element(id);
    if (!target) return;
    target.textContent = "";
    target.hidden = true;
  }

  function isAction(event) {
    var config = event.detail.requestConfig;
    return Boolean(config) && config.verb !== "get";
  }

  function reason(xhr) {
    var text = xhr.responseText || "";
    var type = xhr.getResponseHeader("content-type") || "";
    if (type.indexOf("application/json") === 0) {
      try {
        text = JSON.parse(text).detail || text;
      } catch (error) {
        // not JSON after all: show the status below
      }
    }
    if (!text || type.indexOf("text/html") === 0) text = xhr.status + " " + xhr.statusText;
    return String(text).slice(0, 500);
  }

  document.addEventListener("htmx:responseError", function (event) {
    show(isAction(event) ? "notice" : "banner", reason(event.detail.xhr));
  });
  document.addEventListener("htmx:sendError", function (event) {
    show(isAction(event) ? "notice" : "banner", "the admin server does not answer (retrying)");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (!event.detail.successful) return;
    clear("banner");
    if (isAction(event)) clear("notice");
  });
})();
