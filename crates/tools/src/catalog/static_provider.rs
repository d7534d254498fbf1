//! A source whose resources, templates, prompts and completions are fixed when the
//! process starts: what a tool pack provides.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{
    CatalogError, Completion, CompletionRequest, Fetched, Offers, Provider, Reference, UriTemplate,
};
use crate::BoxFuture;

/// A resource with fixed contents.
#[derive(Debug, Clone)]
pub struct Resource {
    descriptor: Map<String, Value>,
    contents: Vec<Value>,
}

impl Resource {
    pub fn text(uri: &str, name: &str, mime_type: &str, text: &str) -> Self {
        Self::with_contents(
            uri,
            name,
            mime_type,
            json!({ "uri": uri, "mimeType": mime_type, "text": text }),
        )
    }

    /// `blob` is the content, base64-encoded.
    pub fn blob(uri: &str, name: &str, mime_type: &str, blob: &str) -> Self {
        Self::with_contents(
            uri,
            name,
            mime_type,
            json!({ "uri": uri, "mimeType": mime_type, "blob": blob }),
        )
    }

    fn with_contents(uri: &str, name: &str, mime_type: &str, contents: Value) -> Self {
        let mut descriptor = Map::new();
        descriptor.insert("uri".into(), json!(uri));
        descriptor.insert("name".into(), json!(name));
        descriptor.insert("mimeType".into(), json!(mime_type));
        Self {
            descriptor,
            contents: vec![contents],
        }
    }

    #[must_use]
    pub fn description(mut self, description: &str) -> Self {
        self.descriptor
            .insert("description".into(), json!(description));
        self
    }

    fn uri(&self) -> &str {
        self.descriptor
            .get("uri")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

type TemplateRead = dyn Fn(&str, &BTreeMap<String, String>) -> Vec<Value> + Send + Sync;

/// Resources named by a URI template; `read` makes the contents of one expansion.
#[derive(Clone)]
pub struct ResourceTemplate {
    descriptor: Map<String, Value>,
    template: UriTemplate,
    read: Arc<TemplateRead>,
    completions: BTreeMap<String, Vec<String>>,
}

impl ResourceTemplate {
    pub fn new(
        uri_template: &str,
        name: &str,
        mime_type: &str,
        read: impl Fn(&str, &BTreeMap<String, String>) -> Vec<Value> + Send + Sync + 'static,
    ) -> Result<Self, String> {
        let template = UriTemplate::parse(uri_template)?;
        let mut descriptor = Map::new();
        descriptor.insert("uriTemplate".into(), json!(uri_template));
        descriptor.insert("name".into(), json!(name));
        descriptor.insert("mimeType".into(), json!(mime_type));
        Ok(Self {
            descriptor,
            template,
            read: Arc::new(read),
            completions: BTreeMap::new(),
        })
    }

    #[must_use]
    pub fn description(mut self, description: &str) -> Self {
        self.descriptor
            .insert("description".into(), json!(description));
        self
    }

    /// Values offered by `completion/complete` for the variable `variable`.
    #[must_use]
    pub fn complete(mut self, variable: &str, values: &[&str]) -> Self {
        self.completions.insert(
            variable.to_owned(),
            values.iter().map(|v| (*v).to_owned()).collect(),
        );
        self
    }
}

type PromptFn =
    dyn Fn(&Map<String, Value>, &Map<String, Value>) -> Result<Fetched, CatalogError> + Send + Sync;

/// A prompt: its descriptor (with arguments) and the function that renders it from the
/// arguments and any MRTR answers.
#[derive(Clone)]
pub struct Prompt {
    name: String,
    descriptor: Map<String, Value>,
    required: Vec<String>,
    get: Arc<PromptFn>,
    completions: BTreeMap<String, Vec<String>>,
}

impl Prompt {
    pub fn builder(name: &str) -> PromptBuilder {
        PromptBuilder {
            name: name.to_owned(),
            description: String::new(),
            arguments: Vec::new(),
            required: Vec::new(),
            completions: BTreeMap::new(),
        }
    }

    fn render(
        &self,
        arguments: &Map<String, Value>,
        responses: &Map<String, Value>,
    ) -> Result<Fetched, CatalogError> {
        for (key, value) in arguments {
            if !value.is_string() {
                return Err(CatalogError::InvalidParams(format!(
                    "prompt argument {key:?} must be a string"
                )));
            }
        }
        if let Some(missing) = self.required.iter().find(|r| !arguments.contains_key(*r)) {
            return Err(CatalogError::InvalidParams(format!(
                "prompt {:?} requires the argument {missing:?}",
                self.name
            )));
        }
        (self.get)(arguments, responses)
    }
}

#[must_use]
pub struct PromptBuilder {
    name: String,
    description: String,
    arguments: Vec<Value>,
    required: Vec<String>,
    completions: BTreeMap<String, Vec<String>>,
}

impl PromptBuilder {
    pub fn description(mut self, description: &str) -> Self {
        description.clone_into(&mut self.description);
        self
    }

    pub fn argument(mut self, name: &str, description: &str, required: bool) -> Self {
        self.arguments
            .push(json!({ "name": name, "description": description, "required": required }));
        if required {
            self.required.push(name.to_owned());
        }
        self
    }

    /// Values offered by `completion/complete` for the argument `argument`.
    pub fn complete(mut self, argument: &str, values: &[&str]) -> Self {
        self.completions.insert(
            argument.to_owned(),
            values.iter().map(|v| (*v).to_owned()).collect(),
        );
        self
    }

    /// `get` renders a `GetPromptResult` (or asks for input) from checked arguments.
    pub fn build(
        self,
        get: impl Fn(&Map<String, Value>, &Map<String, Value>) -> Result<Fetched, CatalogError>
        + Send
        + Sync
        + 'static,
    ) -> Prompt {
        let mut descriptor = Map::new();
        descriptor.insert("name".into(), json!(self.name));
        descriptor.insert("description".into(), json!(self.description));
        if !self.arguments.is_empty() {
            descriptor.insert("arguments".into(), Value::Array(self.arguments));
        }
        Prompt {
            name: self.name,
            descriptor,
            required: self.required,
            get: Arc::new(get),
            completions: self.completions,
        }
    }
}

/// Fixed resources, templates and prompts, in the order they were added.
#[derive(Clone, Default)]
pub struct StaticProvider {
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    prompts: Vec<Prompt>,
}

impl StaticProvider {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a resource; a URI given twice is an error.
    pub fn resource(mut self, resource: Resource) -> Result<Self, String> {
        if self.resources.iter().any(|r| r.uri() == resource.uri()) {
            return Err(format!("resource {:?} is defined twice", resource.uri()));
        }
        self.resources.push(resource);
        Ok(self)
    }

    pub fn template(mut self, template: ResourceTemplate) -> Result<Self, String> {
        if self
            .templates
            .iter()
            .any(|t| t.template.as_str() == template.template.as_str())
        {
            return Err(format!(
                "resource template {:?} is defined twice",
                template.template.as_str()
            ));
        }
        self.templates.push(template);
        Ok(self)
    }

    /// Adds a prompt; a name given twice is an error.
    pub fn prompt(mut self, prompt: Prompt) -> Result<Self, String> {
        if self.prompts.iter().any(|p| p.name == prompt.name) {
            return Err(format!("prompt {:?} is defined twice", prompt.name));
        }
        self.prompts.push(prompt);
        Ok(self)
    }

    fn completion_values(&self, reference: &Reference) -> Option<&BTreeMap<String, Vec<String>>> {
        match reference {
            Reference::Prompt(name) => self
                .prompts
                .iter()
                .find(|p| &p.name == name)
                .map(|p| &p.completions),
            Reference::ResourceTemplate(uri) => self
                .templates
                .iter()
                .find(|t| t.template.as_str() == uri)
                .map(|t| &t.completions),
        }
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Provider for StaticProvider {
    fn offers(&self) -> Offers {
        let completions = self.prompts.iter().any(|p| !p.completions.is_empty())
            || self.templates.iter().any(|t| !t.completions.is_empty());
        Offers {
            resources: !self.resources.is_empty() || !self.templates.is_empty(),
            prompts: !self.prompts.is_empty(),
            completions,
        }
    }

    fn resources(&self) -> BoxFuture<'_, Result<Vec<Value>, CatalogError>> {
        ready(Ok(self
            .resources
            .iter()
            .map(|r| Value::Object(r.descriptor.clone()))
            .collect()))
    }

    fn resource_templates(&self) -> BoxFuture<'_, Result<Vec<Value>, CatalogError>> {
        ready(Ok(self
            .templates
            .iter()
            .map(|t| Value::Object(t.descriptor.clone()))
            .collect()))
    }

    fn prompts(&self) -> BoxFuture<'_, Result<Vec<Value>, CatalogError>> {
        ready(Ok(self
            .prompts
            .iter()
            .map(|p| Value::Object(p.descriptor.clone()))
            .collect()))
    }

    fn read<'a>(
        &'a self,
        uri: &'a str,
        _responses: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<Option<Fetched>, CatalogError>> {
        let found = self
            .resources
            .iter()
            .find(|r| r.uri() == uri)
            .map(|r| Fetched::Done(Value::Array(r.contents.clone())))
            .or_else(|| {
                self.templates.iter().find_map(|t| {
                    t.template
                        .matches(uri)
                        .map(|vars| Fetched::Done(Value::Array((t.read)(uri, &vars))))
                })
            });
        ready(Ok(found))
    }

    fn get_prompt<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Map<String, Value>,
        responses: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<Option<Fetched>, CatalogError>> {
        let rendered = self
            .prompts
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.render(arguments, responses))
            .transpose();
        ready(rendered)
    }

    fn complete<'a>(
        &'a self,
        request: &'a CompletionRequest,
    ) -> BoxFuture<'a, Result<Option<Completion>, CatalogError>> {
        let completion = self.completion_values(&request.reference).map(|lists| {
            let prefix = request.value.to_lowercase();
            let matching: Vec<&String> = lists
                .get(&request.argument)
                .into_iter()
                .flatten()
                .filter(|v| v.to_lowercase().starts_with(&prefix))
                .collect();
            Completion {
                values: matching
                    .iter()
                    .take(Completion::MAX_VALUES)
                    .map(|v| (*v).clone())
                    .collect(),
                total: matching.len(),
            }
        });
        ready(Ok(completion))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> StaticProvider {
        StaticProvider::new()
            .resource(Resource::text("test://a", "a", "text/plain", "A"))
            .unwrap()
            .template(
                ResourceTemplate::new("test://t/{id}", "t", "text/plain", |uri, vars| {
                    vec![json!({ "uri": uri, "text": vars["id"] })]
                })
                .unwrap()
                .complete("id", &["one", "two", "three"]),
            )
            .unwrap()
            .prompt(
                Prompt::builder("p")
                    .argument("x", "x", true)
                    .complete("x", &["Paris", "park", "Rome"])
                    .build(|args, _| Ok(Fetched::Done(json!({ "messages": [args["x"]] })))),
            )
            .unwrap()
    }

    #[tokio::test]
    async fn reads_prompts_and_completions() {
        let p = provider();
        let none = Map::new();
        assert_eq!(
            p.offers(),
            Offers {
                resources: true,
                prompts: true,
                completions: true
            }
        );
        assert!(matches!(p.read("test://a", &none).await, Ok(Some(_))));
        let Ok(Some(Fetched::Done(t))) = p.read("test://t/7", &none).await else {
            panic!("template read");
        };
        assert_eq!(t[0]["text"], "7");
        assert_eq!(p.read("test://nope", &none).await, Ok(None));

        let args = json!({"x": "hi"}).as_object().cloned().unwrap();
        assert!(matches!(p.get_prompt("p", &args, &none).await, Ok(Some(_))));
        assert!(matches!(
            p.get_prompt("p", &none, &none).await,
            Err(CatalogError::InvalidParams(_))
        ));
        let bad = json!({"x": 1}).as_object().cloned().unwrap();
        assert!(p.get_prompt("p", &bad, &none).await.is_err());
        assert_eq!(p.get_prompt("q", &args, &none).await, Ok(None));

        let ask = |reference, value: &str| CompletionRequest {
            reference,
            argument: "x".into(),
            value: value.into(),
            context: Map::new(),
        };
        let c = p
            .complete(&ask(Reference::Prompt("p".into()), "par"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c.values, ["Paris", "park"]);
        assert_eq!(c.to_json()["hasMore"], false);
        let unknown_arg = p
            .complete(&ask(
                Reference::ResourceTemplate("test://t/{id}".into()),
                "",
            ))
            .await
            .unwrap()
            .unwrap();
        assert!(unknown_arg.values.is_empty());
        assert_eq!(
            p.complete(&ask(Reference::Prompt("q".into()), "")).await,
            Ok(None)
        );
    }

    #[test]
    fn duplicates_are_refused() {
        assert!(
            provider()
                .resource(Resource::text("test://a", "again", "text/plain", ""))
                .is_err()
        );
        assert!(
            provider()
                .prompt(Prompt::builder("p").build(|_, _| Ok(Fetched::Done(json!({})))))
                .is_err()
        );
    }
}
