//! The fixtures the official MCP conformance suite calls, with the names and behaviours
//! its scenarios expect (read from the suite's source, `src/scenarios/server/*.ts`):
//! - `tasks`: the Tasks extension's tools and the `server-stateless` diagnostics;
//! - `content`: the `tools-call-*` tools, `json-schema-2020-12` and SEP-2243 headers;
//! - `mrtr`: the `input-required-result-*` tools (SEP-2322);
//! - `catalog`: resources, templates, prompts and completions.
//!
//! Order matters: the suite's header probes call the *first* listed tool with `{}` and no
//! Tasks extension, so the first tool must succeed on that.

mod catalog;
mod content;
mod mrtr;
mod tasks;

use super::Pack;

pub(super) fn pack() -> Result<Pack, String> {
    let mut tools = tasks::tools()?;
    tools.extend(content::tools()?);
    tools.extend(mrtr::tools()?);
    Ok(Pack {
        tools,
        provider: Some(catalog::provider()?),
    })
}

/// A 1×1 red PNG.
pub(super) const RED_PIXEL_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
