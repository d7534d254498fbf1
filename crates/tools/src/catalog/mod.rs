//! Resources, prompts and completions: the parts of the registry that are not tools.
//!
//! A [`Provider`] is one source of them: a pack's [`StaticProvider`], or later an
//! upstream MCP server whose resources and prompts pass through. The [`Catalog`] puts the
//! sources of one process together, in order: lists are the sources' lists one after the
//! other, and a read, a prompt or a completion goes to the first source that knows it.
//! Every replica with the same configuration builds the same catalog, so every replica
//! gives the same answers.

mod static_provider;
mod uri_template;

use std::sync::Arc;

use mcp_tasks_wire::ErrorObject;
use serde_json::{Map, Value, json};

use crate::{BoxFuture, InputRequests};

pub use static_provider::{Prompt, PromptBuilder, Resource, ResourceTemplate, StaticProvider};
pub use uri_template::UriTemplate;

/// Why a source could not answer.
#[derive(Debug, Clone, PartialEq)]
pub enum CatalogError {
    /// The request's params are wrong (missing prompt arguments, a bad value): `-32602`.
    InvalidParams(String),
    /// Any other JSON-RPC error, e.g. one an upstream server answered with.
    Protocol(ErrorObject),
}

impl CatalogError {
    pub fn into_error_object(self) -> ErrorObject {
        match self {
            Self::InvalidParams(why) => ErrorObject::invalid_params(why),
            Self::Protocol(e) => e,
        }
    }
}

/// The answer to a read or a prompt: the result, or input the source needs first (MRTR).
#[derive(Debug, Clone, PartialEq)]
pub enum Fetched {
    /// `ReadResourceResult.contents` (an array) or a `GetPromptResult` object.
    Done(Value),
    NeedInput(InputRequests),
}

/// What a source offers, for `server/discover` (and a 2025-era `initialize`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offers {
    pub resources: bool,
    pub prompts: bool,
    pub completions: bool,
}

impl Offers {
    fn union(self, other: Self) -> Self {
        Self {
            resources: self.resources || other.resources,
            prompts: self.prompts || other.prompts,
            completions: self.completions || other.completions,
        }
    }
}

/// What a `completion/complete` asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// `ref/prompt` (a prompt name) or `ref/resource` (a URI template).
    pub reference: Reference,
    pub argument: String,
    pub value: String,
    /// Arguments already resolved (`context.arguments`).
    pub context: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    Prompt(String),
    ResourceTemplate(String),
}

/// `CompleteResult.completion`: at most 100 values, with the total when there are more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub values: Vec<String>,
    pub total: usize,
}

impl Completion {
    /// The spec's bound on values in one answer.
    pub const MAX_VALUES: usize = 100;

    pub fn to_json(&self) -> Value {
        json!({
            "values": self.values,
            "total": self.total,
            "hasMore": self.total > self.values.len(),
        })
    }
}

/// One source of resources, prompts and completions. Every method answers `None` (or an
/// empty list) for what is not this source's, so the catalog can ask the next one.
pub trait Provider: Send + Sync {
    fn offers(&self) -> Offers;
    /// `Resource` descriptors, in a fixed order.
    fn resources(&self) -> BoxFuture<'_, Result<Vec<Value>, CatalogError>>;
    /// `ResourceTemplate` descriptors, in a fixed order.
    fn resource_templates(&self) -> BoxFuture<'_, Result<Vec<Value>, CatalogError>>;
    /// `Prompt` descriptors, in a fixed order.
    fn prompts(&self) -> BoxFuture<'_, Result<Vec<Value>, CatalogError>>;
    /// The contents of `uri`, if this source has it. `responses` are the MRTR answers
    /// gathered so far.
    fn read<'a>(
        &'a self,
        uri: &'a str,
        responses: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<Option<Fetched>, CatalogError>>;
    /// The prompt `name` with `arguments`, if this source has it.
    fn get_prompt<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Map<String, Value>,
        responses: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<Option<Fetched>, CatalogError>>;
    /// Completions, if the reference is this source's.
    fn complete<'a>(
        &'a self,
        request: &'a CompletionRequest,
    ) -> BoxFuture<'a, Result<Option<Completion>, CatalogError>>;
}

/// The sources of one process, asked in order.
#[derive(Clone, Default)]
pub struct Catalog {
    providers: Vec<Arc<dyn Provider>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("providers", &self.providers.len())
            .field("offers", &self.offers())
            .finish()
    }
}

impl Catalog {
    pub fn push(&mut self, provider: Arc<dyn Provider>) {
        self.providers.push(provider);
    }

    pub fn offers(&self) -> Offers {
        self.providers
            .iter()
            .fold(Offers::default(), |acc, p| acc.union(p.offers()))
    }

    pub async fn resources(&self) -> Result<Vec<Value>, CatalogError> {
        let mut all = Vec::new();
        for p in &self.providers {
            all.extend(p.resources().await?);
        }
        Ok(all)
    }

    pub async fn resource_templates(&self) -> Result<Vec<Value>, CatalogError> {
        let mut all = Vec::new();
        for p in &self.providers {
            all.extend(p.resource_templates().await?);
        }
        Ok(all)
    }

    pub async fn prompts(&self) -> Result<Vec<Value>, CatalogError> {
        let mut all = Vec::new();
        for p in &self.providers {
            all.extend(p.prompts().await?);
        }
        Ok(all)
    }

    /// `None`: no source has `uri`.
    pub async fn read(
        &self,
        uri: &str,
        responses: &Map<String, Value>,
    ) -> Result<Option<Fetched>, CatalogError> {
        for p in &self.providers {
            if let Some(found) = p.read(uri, responses).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// `None`: no source has a prompt of that name.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        responses: &Map<String, Value>,
    ) -> Result<Option<Fetched>, CatalogError> {
        for p in &self.providers {
            if let Some(found) = p.get_prompt(name, arguments, responses).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// `None`: no source knows the reference.
    pub async fn complete(
        &self,
        request: &CompletionRequest,
    ) -> Result<Option<Completion>, CatalogError> {
        for p in &self.providers {
            if let Some(found) = p.complete(request).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }
}
