//! The official MCP material, copied into this folder (`README.md` names its sources and
//! revisions): its JSON Schemas (the 2026-07-28 core and the Tasks extension) and its
//! example messages. Also included by `crates/tools/tests/spec.rs` and `tests/it/upstream`,
//! which use only part of it.
#![allow(
    dead_code,
    reason = "each test crate that includes this uses part of it"
)]

use std::path::{Path, PathBuf};

use serde_json::Value;

/// This folder. The crates that include this file sit at different depths of the
/// workspace, so it is found from the including crate's manifest upwards.
pub(crate) fn dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = manifest
        .ancestors()
        .map(|a| a.join("crates/wire/tests/official"))
        .find(|d| d.join("schema").is_dir());
    found.unwrap_or_else(|| {
        panic!(
            "the official MCP material (crates/wire/tests/official/schema) is not in the workspace above {}",
            manifest.display()
        )
    })
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The two official schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Schema {
    /// MCP 2026-07-28.
    Core,
    /// `io.modelcontextprotocol/tasks`.
    Tasks,
}

impl Schema {
    fn file(self) -> &'static str {
        match self {
            Self::Core => "schema/mcp-2026-07-28.schema.json",
            Self::Tasks => "schema/tasks-extension.schema.json",
        }
    }

    pub(crate) fn document(self) -> Value {
        read_json(&dir().join(self.file()))
    }
}

/// Validators for the definitions of one schema document.
pub(crate) struct Definitions {
    schema: Schema,
    document: Value,
}

impl Definitions {
    pub(crate) fn load(schema: Schema) -> Self {
        Self {
            schema,
            document: schema.document(),
        }
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.document["$defs"]
            .as_object()
            .expect("$defs")
            .keys()
            .cloned()
            .collect()
    }

    /// The whole document with `$ref` to one definition at its root, so every `$ref`
    /// inside resolves against the document's own `$defs`.
    fn validator(&self, definition: &str) -> jsonschema::Validator {
        assert!(
            self.document["$defs"].get(definition).is_some(),
            "{:?} schema has no definition {definition}",
            self.schema
        );
        let mut root = self.document.clone();
        root["$ref"] = Value::String(format!("#/$defs/{definition}"));
        jsonschema::validator_for(&root)
            .unwrap_or_else(|e| panic!("compiling {:?}#{definition}: {e}", self.schema))
    }

    /// The errors of `instance` against `definition`, one line each.
    pub(crate) fn errors(&self, definition: &str, instance: &Value) -> Vec<String> {
        self.validator(definition)
            .iter_errors(instance)
            .map(|e| format!("at {}: {e}", e.instance_path()))
            .collect()
    }

    /// Fails the test, naming what was checked, unless `instance` is a `definition`.
    #[track_caller]
    pub(crate) fn check(&self, definition: &str, instance: &Value) {
        let errors = self.errors(definition, instance);
        assert!(
            errors.is_empty(),
            "not a valid {:?} {definition}:\n{}\n{}",
            self.schema,
            serde_json::to_string_pretty(instance).unwrap_or_default(),
            errors.join("\n")
        );
    }
}

/// One official example: the definition it illustrates (its directory's name) and its
/// JSON.
pub(crate) struct Example {
    pub(crate) definition: String,
    pub(crate) path: PathBuf,
    pub(crate) json: Value,
}

/// Every official example, in a stable order.
pub(crate) fn examples() -> Vec<Example> {
    let root = dir().join("examples");
    let mut found = Vec::new();
    let dirs = std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    for entry in dirs {
        let entry = entry.expect("examples entry");
        let definition = entry.file_name().to_string_lossy().into_owned();
        for file in std::fs::read_dir(entry.path()).expect("example directory") {
            let path = file.expect("example file").path();
            if path.extension().is_some_and(|x| x == "json") {
                found.push(Example {
                    definition: definition.clone(),
                    json: read_json(&path),
                    path,
                });
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    assert!(
        found.len() > 100,
        "only {} official examples under {}: the spec material is incomplete",
        found.len(),
        root.display()
    );
    found
}

/// The examples of one definition; at least one must exist.
pub(crate) fn examples_of(definition: &str) -> Vec<Value> {
    let found: Vec<Value> = examples()
        .into_iter()
        .filter(|e| e.definition == definition)
        .map(|e| e.json)
        .collect();
    assert!(!found.is_empty(), "no official example of {definition}");
    found
}
