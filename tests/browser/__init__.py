"""The page (issue 34) in a real browser: Debian's Chromium, headless, driven by Selenium through chromedriver.

`tests.browser.support` holds the harness: the browser (installed by `make browser`; the tests skip, saying why,
where it cannot be), an in-process daemon behind a listener serving the page, and `Page`, whose waits on the
page's ids, classes and data attributes (`#threads`, `#timeline`, `#pending`, `data-seq`, ...) run in worker
threads, so the daemon keeps serving on the trio loop meanwhile.
"""
