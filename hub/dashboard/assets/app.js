// The dashboard's only script. It polls the page's live part every 2 s and
// swaps it in, so lists follow the hub without a reload; the server escapes
// every string in the fragment. It also copies the enrol command.
(function () {
  "use strict";
  var live = document.querySelector("[data-live]");
  var busy = false;
  function tick() {
    if (!live || busy || document.hidden) return;
    busy = true;
    var u = new URL(window.location.href);
    u.searchParams.set("frag", "1");
    fetch(u.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); throw new Error("signed out"); }
        if (!r.ok) throw new Error("status " + r.status);
        return r.text();
      })
      .then(function (html) { live.innerHTML = html; document.body.classList.remove("stale"); })
      .catch(function () { document.body.classList.add("stale"); })
      .finally(function () { busy = false; });
  }
  setInterval(tick, 2000);
  document.addEventListener("click", function (e) {
    var b = e.target.closest("[data-copy]");
    if (!b || !navigator.clipboard) return;
    var el = document.getElementById(b.getAttribute("data-copy"));
    if (el) navigator.clipboard.writeText(el.textContent).then(function () { b.textContent = "Copied"; });
  });
})();
