// Keyboard navigation between turns (j/k, or n/p between differences on a diff), and nothing else:
// every page works without it. Loaded from this origin only (the Content-Security-Policy).
"use strict";
(function () {
  function items(selector) { return Array.prototype.slice.call(document.querySelectorAll(selector)); }
  function current(list) {
    var id = window.location.hash.slice(1);
    for (var i = 0; i < list.length; i++) { if (list[i].id === id) { return i; } }
    var top = window.scrollY + 10;  // otherwise: the first one at or below the top of the window
    for (var j = 0; j < list.length; j++) { if (list[j].getBoundingClientRect().top + window.scrollY >= top) { return j - 1; } }
    return list.length - 1;
  }
  function go(list, step) {
    if (!list.length) { return; }
    var next = Math.max(0, Math.min(list.length - 1, current(list) + step));
    var target = list[next];
    history.replaceState(null, "", "#" + target.id);
    target.scrollIntoView({block: "start"});
    items(".current").forEach(function (el) { el.classList.remove("current"); });
    target.classList.add("current");
  }
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) { return; }
    var tag = (event.target && event.target.tagName) || "";
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") { return; }
    var key = event.key;
    if (key === "j" || key === "k") { go(items("[data-turn]"), key === "j" ? 1 : -1); }
    else if (key === "n" || key === "p") { go(items("[data-difference]"), key === "n" ? 1 : -1); }
    else if (key === "t") { items("details.thinking").forEach(function (d) { d.open = !d.open; }); }
    else if (key === "/") { var box = document.querySelector("form.search input"); if (box) { event.preventDefault(); box.focus(); } }
  });
})();
