//! The built-in tool packs, chosen with `--tools` / `MCP_TASKS_TOOLS`.

mod conformance;
mod demo;

use crate::{RegistryError, Tool};

/// Every pack name `--tools` accepts.
pub const NAMES: &[&str] = &["demo", "conformance"];

/// The tools of one pack, or `None` for an unknown name.
pub fn pack(name: &str) -> Option<Result<Vec<Tool>, RegistryError>> {
    let tools = match name {
        "demo" => demo::tools(),
        "conformance" => conformance::tools(),
        _ => return None,
    };
    Some(tools.map_err(RegistryError::InvalidTool))
}
