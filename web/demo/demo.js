// The demo page's own script: it reads the page's configuration (written
// into the page by the demo site), imports the snippet (the site's own
// copy, so that the form works even while the api is out of reach), and
// hands it the form. Should the snippet not load, the form still posts to
// /not-sent, which tells the visitor that nothing was sent.
const config = JSON.parse(document.getElementById("leadintake-config").textContent);
const form = document.getElementById("enquiry");
try {
  const { attachForm } = await import(config.snippet);
  attachForm(form, config.options);
  form.dataset.leadintakeReady = "true";
} catch {
  form.dataset.leadintakeState = "failed";
  document.getElementById("status").textContent =
    "This form cannot reach our server right now, so it cannot send your enquiry. Please try again later, or email us at sales@acme.example.";
}
