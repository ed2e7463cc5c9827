// The buttons that open the table of contents (☰) and "on this page" work on every screen.
//
// sphinx-book-theme 1.3.0 draws both buttons in the article's header; pydata-sphinx-theme 0.17.1,
// which it builds on, draws two more of the same classes (.primary-toggle, .secondary-toggle) in its
// own header, which sphinx-book-theme hides. Both themes' scripts wire up the first button of each
// class in the page (document.querySelector): the hidden ones. The buttons a reader sees had no
// listener, and a click did nothing: on a phone the table of contents stayed off screen, on a laptop
// it did not fold away (https://github.com/pydata/pydata-sphinx-theme/issues/2451). The fontawesome
// and search scripts that _templates/layout.html leaves out play no part: with them the buttons did
// nothing either. So a click on a button that no theme script handled is handed here to the button
// they listen to (theirs stop the click's propagation and mark it handled, so a handled click never
// gets here): the themes' own code then opens the panel as a dialog on a narrow screen, or folds the
// table of contents away on a wide one. A theme that wires the right button handles the click
// first, and this does nothing. tests/test_site.py opens and closes both panels on a phone and a
// laptop (test_the_table_of_contents_and_on_this_page_open_and_close).
(function () {
  "use strict";

  document.addEventListener("click", function (event) {
    const button = event.target instanceof Element && event.target.closest(".primary-toggle, .secondary-toggle");
    if (!button || event.defaultPrevented) return;
    const kind = button.classList.contains("primary-toggle") ? ".primary-toggle" : ".secondary-toggle";
    const wired = document.querySelector(kind);
    if (!wired || wired === button) return;
    event.preventDefault();
    wired.click();
    // as the theme does for its button: no tooltip left standing over the page
    if (document.activeElement === button) button.blur();
  });
})();
