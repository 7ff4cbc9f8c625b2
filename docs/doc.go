// Package docs holds no code: its tests keep the Markdown documentation
// (README.md, the other top-level pages and docs/*.md) honest. They check
// that every relative link and #anchor resolves, that every file path and
// Go test name the pages cite exists, that every clients-file example is
// read by the real parser, and that the generated tables (the environment,
// `api -h`, the alerts, the error codes) are what the code says. `make docs`
// runs them with -update, which writes the tables instead of comparing.
package docs
