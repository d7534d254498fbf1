//! The web console (`serve --console`).
//!
//! - `browser`, `browser_tasks`, `browser_access`: the console in Debian's chromium over
//!   WebDriver (the acceptance of issue 15), with screenshots of every page.

mod browser;
mod browser_access;
mod browser_tasks;
