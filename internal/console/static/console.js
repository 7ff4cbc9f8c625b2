// The console works without this file. With it, a list of checkboxes gets
// a "select all" box in its header.
document.querySelectorAll("input[data-select-all]").forEach(function (all) {
  var name = all.getAttribute("data-select-all");
  var boxes = all.form.querySelectorAll('input[type=checkbox][name="' + name + '"]');
  all.hidden = false;
  all.addEventListener("change", function () {
    boxes.forEach(function (b) { b.checked = all.checked; });
  });
});
