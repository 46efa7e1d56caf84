/* The objective page: a form with data-confirm asks first (confirm()); on yes it fills
   its `confirmed` field so the server records the action at once. Without JavaScript
   the field stays empty and the server shows its confirmation page instead. */
(function () {
  "use strict";
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      var field = form.querySelector("input[name=confirmed]");
      if (!window.confirm(form.getAttribute("data-confirm"))) {
        event.preventDefault();
        return;
      }
      if (field) { field.value = field.getAttribute("data-confirmed"); }
    });
  });
})();
