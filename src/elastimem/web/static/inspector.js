// Dates are stored and served in UTC (ISO 8601); show them in the reader's local time.
// The page reads fine without this script: the UTC text stays.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var format = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var when = new Date(el.getAttribute("datetime"));
    if (!isNaN(when.getTime())) {
      el.title = el.getAttribute("datetime");
      el.textContent = format.format(when);
    }
  });
});
