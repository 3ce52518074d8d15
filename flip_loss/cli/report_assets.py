"""The style sheet and the script of the HTML report (``report``), written into the page itself so
that it needs no other file and no network. The script sorts the pairs table (and the pictures
with it), flips a pair's first picture between reference and test (button or key F in the pair
that has the focus) and swaps a pair's thumbnails for the full-size pictures; the page reads
without it."""

PAGE_STYLE = """\
:root { color-scheme: light dark; --fg: #1d1d1f; --bg: #fafafa; --panel: #fff; --line: #d0d0d6;
        --muted: #5c5c66; --bad: #b3261e; --good: #1e6b34; --focus: #1a5fd0; --frame: #202024; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #ececf0; --bg: #16161a; --panel: #202026; --line: #3a3a44; --muted: #a8a8b4;
          --bad: #ff8a80; --good: #7bd88f; --focus: #8ab4ff; --frame: #000; }
}
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
       background: var(--bg); }
header, main { max-width: 1400px; margin: 0 auto; padding: 0 20px; }
h1 { font-size: 1.6em; margin: 20px 0 4px; }
h2 { font-size: 1.25em; margin: 28px 0 10px; }
h3 { font-size: 1.05em; margin: 0 0 4px; overflow-wrap: anywhere; }
code { font-size: 0.92em; overflow-wrap: anywhere; }
kbd { font: 0.85em ui-monospace, monospace; border: 1px solid var(--line); border-radius: 3px;
      padding: 0 4px; }
a { color: var(--focus); }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }
.skip { position: absolute; left: -9999px; }
.hidden-label { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%);
                white-space: nowrap; }
.skip:focus { left: 12px; top: 8px; background: var(--panel); padding: 6px 10px; z-index: 2; }
.hint { color: var(--muted); margin: 4px 0 10px; }
.bad { color: var(--bad); }
.good { color: var(--good); }
.badge { display: inline-block; font-size: 0.8em; font-weight: 600; padding: 1px 7px; border-radius: 9px;
         border: 1px solid currentColor; white-space: nowrap; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 0; }
dl.summary dt { color: var(--muted); }
dl.summary dd { margin: 0; }
table { border-collapse: collapse; width: 100%; background: var(--panel); }
caption { text-align: left; color: var(--muted); padding: 0 0 6px; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
thead th { position: sticky; top: 0; background: var(--panel); z-index: 1; vertical-align: bottom; }
tbody th { font-weight: normal; overflow-wrap: break-word; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.over td, tr.over th, tr.failed td, tr.failed th { background: color-mix(in srgb, var(--bad) 10%, transparent); }
.why { color: var(--muted); font-size: 0.9em; overflow-wrap: anywhere; }
button { font: inherit; color: inherit; background: var(--panel); border: 1px solid var(--line);
         border-radius: 6px; padding: 3px 10px; cursor: pointer; }
button[aria-pressed="true"] { background: color-mix(in srgb, var(--focus) 22%, var(--panel)); }
button.sort { border: 0; padding: 2px 4px; font-weight: 600; background: none; }
th[aria-sort="descending"] button.sort::after { content: " \\25BC"; }
th[aria-sort="ascending"] button.sort::after { content: " \\25B2"; }
.pair { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px;
        margin: 0 0 14px; }
.pair:focus { outline: 2px solid var(--focus); }
.paths, .details { color: var(--muted); font-size: 0.9em; margin: 0 0 4px; }
.values { margin: 4px 0; display: flex; flex-wrap: wrap; gap: 4px 16px; font-variant-numeric: tabular-nums; }
.failure { margin: 6px 0 0; }
.controls { display: flex; gap: 8px; margin: 8px 0; }
.pictures { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
figure { margin: 0; }
figcaption { font-size: 0.9em; color: var(--muted); margin-top: 2px; }
.frame { background: var(--frame); line-height: 0; }
.frame img { image-rendering: pixelated; max-width: 100%; height: auto; }
.pair.full .pictures { flex-direction: column; }
.pair.full .frame { overflow: auto; max-height: 90vh; max-width: 100%; }
.pair.full .frame img { max-width: none; width: auto; }
.histogram-figure { max-width: 290px; }
svg.histogram { background: var(--panel); max-width: 100%; height: auto; }
svg.histogram .bars rect { fill: #5b8fd6; }
svg.histogram line { stroke-width: 1.5; }
svg.histogram .mean { stroke: #d62728; }
svg.histogram .median { stroke: #7f7f7f; }
svg.histogram .quartile { stroke: #9467bd; stroke-dasharray: 3 2; }
svg.histogram .axis { stroke: var(--muted); fill: none; }
svg.histogram text { fill: var(--muted); font-size: 10px; }
.key::before { content: ""; display: inline-block; width: 12px; height: 3px; margin: 0 4px 3px 0;
               vertical-align: middle; }
.key.mean::before { background: #d62728; }
.key.median::before { background: #7f7f7f; }
.key.quartile::before { background: #9467bd; }
"""

PAGE_SCRIPT = """\
(function () {
  "use strict";
  var table = document.getElementById("pairs-table");
  var cards = document.getElementById("pair-cards");
  var sortStatus = document.getElementById("sort-status");
  var headings = table ? Array.prototype.slice.call(table.tHead.rows[0].cells) : [];
  var labels = {};

  function sortValue(row, key) {
    if (key === "test") { return row.getAttribute("data-test"); }
    var text = row.getAttribute("data-" + key);
    return text === null ? Infinity : parseFloat(text);  // a failed pair counts as the worst
  }

  function sortBy(key, descending) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = sortValue(a, key), y = sortValue(b, key);
      var order = key === "test" ? x.localeCompare(y) : (x < y ? -1 : (x > y ? 1 : 0));
      if (descending) { order = -order; }
      return order || parseInt(a.getAttribute("data-index"), 10) - parseInt(b.getAttribute("data-index"), 10);
    });
    rows.forEach(function (row) {  // the pictures follow the table's order
      body.appendChild(row);
      var card = document.getElementById("pair-" + row.getAttribute("data-index"));
      if (card) { cards.appendChild(card); }
    });
    table.setAttribute("data-sort-key", key);
    table.setAttribute("data-sort-descending", String(descending));
    headings.forEach(function (th) {
      if (th.getAttribute("data-sort-key") === key) {
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      } else {
        th.removeAttribute("aria-sort");
      }
    });
    var direction = key === "test" ? (descending ? "Z to A" : "A to Z")
                                    : (descending ? "largest first" : "smallest first");
    sortStatus.textContent = labels[key] + ", " + direction;
  }

  headings.forEach(function (th) {
    var key = th.getAttribute("data-sort-key");
    if (!key) { return; }
    labels[key] = th.textContent;
    th.querySelector("button").addEventListener("click", function () {
      var same = table.getAttribute("data-sort-key") === key;
      var descending = table.getAttribute("data-sort-descending") === "true";
      // A new column starts worst first (names A to Z); the same column again reverses.
      sortBy(key, same ? !descending : key !== "test");
    });
  });

  function show(card) {
    var flipped = card.getAttribute("data-flipped") === "true";
    var full = card.getAttribute("data-full") === "true";
    Array.prototype.forEach.call(card.querySelectorAll("img[data-thumbnail]"), function (img) {
      var flips = img.hasAttribute("data-flip-thumbnail");
      var source = img.getAttribute("data-" + (flipped && flips ? "flip-" : "") + (full ? "full" : "thumbnail"));
      if (img.getAttribute("src") !== source) { img.setAttribute("src", source); }
      if (flips) {
        img.setAttribute("alt", img.getAttribute(flipped ? "data-flip-alt" : "data-alt"));
        if (full) { new Image().src = img.getAttribute("data-" + (flipped ? "full" : "flip-full")); }
      }
    });
    var caption = card.querySelector(".flip-caption");
    if (caption) { caption.textContent = caption.getAttribute(flipped ? "data-flip-caption" : "data-caption"); }
    var flip = card.querySelector("button.flip"), size = card.querySelector("button.full-size");
    if (flip) { flip.setAttribute("aria-pressed", String(flipped)); }
    if (size) { size.setAttribute("aria-pressed", String(full)); }
    card.classList.toggle("full", full);
  }

  function toggle(card, attribute) {
    card.setAttribute(attribute, String(card.getAttribute(attribute) !== "true"));
    show(card);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.flip, button.full-size");
    if (!button) { return; }
    toggle(button.closest(".pair"), button.classList.contains("flip") ? "data-flipped" : "data-full");
  });

  // F flips the pair that holds the focus (its card, a button or a link in it).
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || (event.key !== "f" && event.key !== "F")) { return; }
    var focused = document.activeElement;
    var card = focused && focused.closest ? focused.closest(".pair") : null;
    if (!card || !card.querySelector("button.flip")) { return; }
    event.preventDefault();
    toggle(card, "data-flipped");
  });

  // Following a pair's link in the table gives its card the focus, so that F flips it at once.
  function focusLinkedPair() {
    var target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    if (target && target.classList.contains("pair")) { target.focus(); }
  }
  window.addEventListener("hashchange", focusLinkedPair);
  focusLinkedPair();
}());
"""
