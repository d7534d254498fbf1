//! The built-in tool packs, chosen with `--tools` / `MCP_TASKS_TOOLS`.

mod conformance;
mod demo;

use crate::Tool;
use crate::catalog::StaticProvider;

/// What one pack brings: tools, and perhaps resources, prompts and completions.
pub struct Pack {
    pub tools: Vec<Tool>,
    pub provider: Option<StaticProvider>,
}

/// Every pack name `--tools` accepts.
pub const NAMES: &[&str] = &["demo", "conformance"];

/// One pack, or `None` for an unknown name; `Err` says which of its tools is invalid.
pub fn pack(name: &str) -> Option<Result<Pack, String>> {
    let pack = match name {
        "demo" => demo::tools().map(|tools| Pack {
            tools,
            provider: None,
        }),
        "conformance" => conformance::pack(),
        _ => return None,
    };
    Some(pack)
}
