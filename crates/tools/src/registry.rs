//! The tools one process serves, with their argument validators compiled once.

use std::collections::HashMap;
use std::sync::Arc;

use mcp_tasks_wire::param_headers::{HeaderParam, header_params};
use serde_json::Value;

use crate::catalog::{Catalog, Provider, StaticProvider};
use crate::{Tool, packs};

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("unknown tool pack {0:?} (known packs: {known})", known = packs::NAMES.join(", "))]
    UnknownPack(String),
    #[error("tool {0:?} is defined twice")]
    Duplicate(String),
    #[error("tool {name:?} has an invalid inputSchema: {reason}")]
    InvalidSchema { name: String, reason: String },
    #[error("tool {name:?} has an invalid x-mcp-header annotation: {reason}")]
    InvalidHeader { name: String, reason: String },
    #[error("{0}")]
    InvalidTool(String),
}

struct Entry {
    tool: Tool,
    validator: jsonschema::Validator,
    /// Its `x-mcp-header` parameters (SEP-2243), whose headers every call must carry.
    header_params: Vec<HeaderParam>,
}

/// An immutable set of tools, with the catalog of resources, prompts and completions
/// that goes with them. `tools/list` is computed once, so it is identical on every call
/// and every replica with the same configuration.
#[derive(Clone)]
pub struct Registry {
    entries: Arc<Vec<Entry>>,
    by_name: Arc<HashMap<String, usize>>,
    list: Arc<Value>,
    catalog: Catalog,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| &e.tool.name))
            .finish()
    }
}

impl Registry {
    /// Builds a registry from tools, in the order given (which is the `tools/list` order).
    pub fn new(tools: impl IntoIterator<Item = Tool>) -> Result<Self, RegistryError> {
        let mut entries = Vec::new();
        let mut by_name = HashMap::new();
        for tool in tools {
            if by_name.contains_key(&tool.name) {
                return Err(RegistryError::Duplicate(tool.name));
            }
            let validator = jsonschema::validator_for(&tool.input_schema).map_err(|e| {
                RegistryError::InvalidSchema {
                    name: tool.name.clone(),
                    reason: e.to_string(),
                }
            })?;
            // A definition clients must reject is refused here, not shipped.
            let header_params = header_params(&tool.input_schema).map_err(|reason| {
                RegistryError::InvalidHeader {
                    name: tool.name.clone(),
                    reason,
                }
            })?;
            by_name.insert(tool.name.clone(), entries.len());
            entries.push(Entry {
                tool,
                validator,
                header_params,
            });
        }
        let list = Value::Array(entries.iter().map(|e| e.tool.descriptor()).collect());
        Ok(Self {
            entries: Arc::new(entries),
            by_name: Arc::new(by_name),
            list: Arc::new(list),
            catalog: Catalog::default(),
        })
    }

    /// Adds a source of resources, prompts and completions, asked after those already
    /// added (a pack's, then an upstream server's, say).
    #[must_use]
    pub fn with_provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.catalog.push(provider);
        self
    }

    /// The resources, prompts and completions served next to the tools.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The `x-mcp-header` parameters of a tool (empty for an unknown one).
    pub fn header_params(&self, name: &str) -> &[HeaderParam] {
        self.by_name
            .get(name)
            .map_or(&[], |&i| &self.entries[i].header_params)
    }

    /// Builds a registry from a comma-separated list of pack names, e.g. `demo,conformance`.
    pub fn from_packs(spec: &str) -> Result<Self, RegistryError> {
        let (tools, providers) = packs_parts(spec)?;
        let mut registry = Self::new(tools)?;
        for provider in providers {
            registry = registry.with_provider(Arc::new(provider));
        }
        Ok(registry)
    }

    /// The tools as given, in their order.
    pub fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.entries.iter().map(|e| &e.tool)
    }

    /// This registry's tools followed by `more`, with the same catalog (the built-in
    /// tools and packs, then what upstream servers add).
    pub fn extended(&self, more: impl IntoIterator<Item = Tool>) -> Result<Self, RegistryError> {
        let mut registry = Self::new(self.tools().cloned().chain(more))?;
        registry.catalog = self.catalog.clone();
        Ok(registry)
    }
}

/// The tools and catalog sources of a comma-separated list of pack names; `none` (or
/// nothing) is no pack.
fn packs_parts(spec: &str) -> Result<(Vec<Tool>, Vec<StaticProvider>), RegistryError> {
    let mut tools = Vec::new();
    let mut providers = Vec::new();
    for name in spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "none")
    {
        let pack = packs::pack(name)
            .ok_or_else(|| RegistryError::UnknownPack(name.into()))?
            .map_err(RegistryError::InvalidTool)?;
        tools.extend(pack.tools);
        providers.extend(pack.provider);
    }
    Ok((tools, providers))
}

impl Registry {
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).map(|&i| &self.entries[i].tool)
    }

    /// The `tools` array of `tools/list`.
    pub fn list(&self) -> &Value {
        &self.list
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.tool.name.as_str())
    }

    /// Whether `other` is this very snapshot (a clone of it), so that what was derived
    /// from one need not be derived again from the other.
    pub fn same_snapshot(&self, other: &Registry) -> bool {
        Arc::ptr_eq(&self.entries, &other.entries)
    }

    /// Checks arguments against the tool's inputSchema; the error names what is wrong and
    /// where, without echoing values.
    pub fn validate_arguments(&self, name: &str, arguments: &Value) -> Result<(), String> {
        let Some(&i) = self.by_name.get(name) else {
            return Err(format!("unknown tool {name:?}"));
        };
        let errors: Vec<String> = self.entries[i]
            .validator
            .iter_errors(arguments)
            .take(3)
            .map(|e| crate::input::describe(&e))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn packs_load_and_list_is_stable() {
        let a = Registry::from_packs("demo,conformance").unwrap();
        let b = Registry::from_packs("demo, conformance").unwrap();
        assert_eq!(a.list(), b.list());
        assert!(a.get("generate_report").is_some());
        assert!(a.get("slow_compute").is_some());
        assert!(matches!(
            Registry::from_packs("nope"),
            Err(RegistryError::UnknownPack(_))
        ));
        assert!(matches!(
            Registry::from_packs("demo,demo"),
            Err(RegistryError::Duplicate(_))
        ));
    }

    #[test]
    fn tools_with_invalid_header_annotations_are_refused() {
        let tool = |schema| {
            crate::Tool::builder("t")
                .input_schema(schema)
                .handler(|_ctx| async { Ok(crate::Outcome::text("")) })
                .build()
                .unwrap()
        };
        let ok =
            tool(json!({"type":"object","properties":{"r":{"type":"string","x-mcp-header":"R"}}}));
        let r = Registry::new([ok]).unwrap();
        assert_eq!(r.header_params("t").len(), 1);
        assert!(r.header_params("nope").is_empty());
        for bad in [
            json!({"type":"object","properties":{"n":{"type":"number","x-mcp-header":"N"}}}),
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"bad name"}}}),
        ] {
            assert!(matches!(
                Registry::new([tool(bad)]),
                Err(RegistryError::InvalidHeader { .. })
            ));
        }
    }

    #[test]
    fn argument_errors_name_the_problem() {
        let r = Registry::from_packs("conformance").unwrap();
        assert!(r.validate_arguments("greet", &json!({"name":"x"})).is_ok());
        let e = r.validate_arguments("greet", &json!({})).unwrap_err();
        assert!(e.contains("name"), "{e}");
        let e = r
            .validate_arguments("slow_compute", &json!({"seconds":"secret-value"}))
            .unwrap_err();
        assert!(e.contains("/seconds") && !e.contains("secret-value"), "{e}");
    }
}
