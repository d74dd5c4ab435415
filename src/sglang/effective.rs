//! Which sampling parameters a request really runs with: SGLang's merge of the request, the
//! model's `generation_config.json`, `--preferred-sampling-params` and the OpenAI defaults.
//!
//! The merge decides the path more often than the request does: a Qwen3 model ships `top_k = 20`
//! and `top_p = 0.95`, and SGLang's chat endpoint fills them into every request that does not set
//! its own, which takes the whole decode batch off the fast path.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::json::{self, FieldError};
use super::params::{SamplingParams, DEFAULTS};

/// The HTTP endpoint a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// `/v1/chat/completions` (`OpenAIServingChat`).
    Chat,
    /// `/v1/responses`, served by a subclass of the chat server.
    Responses,
    /// `/v1/completions`.
    Completions,
    /// SGLang's native `/generate`; its body holds the parameters under `sampling_params`.
    Generate,
}

impl Endpoint {
    /// Whether an OpenAI-compatible layer resolves the parameters before the tokenizer manager:
    /// that layer hands on a value for every merged key, defaults included.
    fn is_openai(self) -> bool {
        self != Endpoint::Generate
    }

    /// Whether `--sampling-defaults model` lets the model's `generation_config.json` in. Only the
    /// chat server reads it (and `/v1/responses`, which inherits from it); `/v1/completions` and
    /// `/generate` never do.
    fn reads_generation_config(self) -> bool {
        matches!(self, Endpoint::Chat | Endpoint::Responses)
    }

    /// The sampling fields of a request body sent to this endpoint. The OpenAI endpoints take them
    /// at the top level; `/generate` takes them from its `sampling_params` object (absent: none).
    pub fn sampling_params(self, body: &Value) -> Result<SamplingParams, FieldError> {
        let body = json::object(body, "body")?;
        if self != Endpoint::Generate {
            return SamplingParams::from_object(body).map_err(|e| e.within("body"));
        }
        match body.get("sampling_params") {
            None | Some(Value::Null) => Ok(SamplingParams::default()),
            Some(inner) => {
                let inner = json::object(inner, "sampling_params").map_err(|e| e.within("body"))?;
                SamplingParams::from_object(inner).map_err(|e| e.within("sampling_params").within("body"))
            }
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Endpoint::Chat => "chat",
            Endpoint::Responses => "responses",
            Endpoint::Completions => "completions",
            Endpoint::Generate => "generate",
        })
    }
}

/// SGLang's `--sampling-defaults`: where the chat endpoint takes unset parameters from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SamplingDefaults {
    /// The model's `generation_config.json` (SGLang's default).
    #[default]
    Model,
    /// The OpenAI defaults only.
    Openai,
}

impl FromStr for SamplingDefaults {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "model" => Ok(SamplingDefaults::Model),
            "openai" => Ok(SamplingDefaults::Openai),
            other => Err(format!("expected `model` or `openai`, got `{other}`")),
        }
    }
}

/// The sampling keys SGLang takes from a model's `generation_config.json`
/// (`ModelConfig.get_default_sampling_params`); every other key of the file is ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct GenerationConfig {
    /// `temperature`, when the file sets it.
    pub temperature: Option<f64>,
    /// `top_k`, when the file sets it.
    pub top_k: Option<i64>,
    /// `top_p`, when the file sets it.
    pub top_p: Option<f64>,
    /// `min_p`, when the file sets it.
    pub min_p: Option<f64>,
}

impl TryFrom<Value> for GenerationConfig {
    type Error = FieldError;

    fn try_from(value: Value) -> Result<Self, FieldError> {
        let object = json::object(&value, "generation_config")?;
        Ok(GenerationConfig {
            temperature: json::optional(object, "temperature")?,
            top_k: json::optional(object, "top_k")?,
            top_p: json::optional(object, "top_p")?,
            min_p: json::optional(object, "min_p")?,
        })
    }
}

impl GenerationConfig {
    fn as_params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            seed: None,
        }
    }
}

/// The server-side inputs to the merge: how SGLang was started and which model it serves.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerDefaults {
    /// `--sampling-defaults`.
    pub sampling_defaults: SamplingDefaults,
    /// The model's `generation_config.json`, when it ships one.
    pub generation_config: Option<GenerationConfig>,
    /// `--preferred-sampling-params`.
    pub preferred: Option<SamplingParams>,
}

impl ServerDefaults {
    /// The parameters SGLang's scheduler will see for `request` on `endpoint`, before
    /// normalization, every field but `seed` set. SGLang resolves them in two layers, and so does
    /// this; for each field the first source that sets it wins:
    ///
    /// 1. The endpoint. Chat and Responses: the request, then (with `--sampling-defaults model`)
    ///    the model's `generation_config`, then the OpenAI defaults. Completions: the request,
    ///    then the OpenAI defaults. Generate: the request only.
    /// 2. The tokenizer manager, on every endpoint: what the endpoint passed on, then
    ///    `--preferred-sampling-params`, then `SamplingParams`' defaults (the same numbers).
    ///
    /// So `--preferred-sampling-params` ranks below the request and `generation_config`, and
    /// above the defaults, as the seed account has it ("merges into every request on every
    /// endpoint"). Why it in effect never reaches temperature, top_p, top_k or min_p on the OpenAI
    /// endpoints: the merge is `{**preferred_sampling_params, **obj.sampling_params}`, and those
    /// endpoints' `_build_sampling_params` put a value for all four keys into that dict, their
    /// defaults included. Only `/generate`, whose dict holds just what the client sent, lets
    /// preferred values fill the gaps. Two layers give both behaviours from one rule instead of
    /// a special case per endpoint. `seed` is not among the four keys, so preferred fills it
    /// on every endpoint.
    pub fn effective(&self, endpoint: Endpoint, request: &SamplingParams) -> SamplingParams {
        let mut params = *request;
        if endpoint.is_openai() {
            if let Some(model) = self.model_config(endpoint) {
                params = params.or(&model.as_params());
            }
            params = params.or(&DEFAULTS);
        }
        if let Some(preferred) = &self.preferred {
            params = params.or(preferred);
        }
        params.or(&DEFAULTS)
    }

    fn model_config(&self, endpoint: Endpoint) -> Option<&GenerationConfig> {
        let reads = endpoint.reads_generation_config() && self.sampling_defaults == SamplingDefaults::Model;
        self.generation_config.as_ref().filter(|_| reads)
    }
}

/// One request as the audit reads it: `{"id": ..., "endpoint": ..., "body": {...}}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub struct Request {
    /// The request's name in the trace.
    pub id: String,
    /// The endpoint it was sent to.
    pub endpoint: Endpoint,
    /// The sampling fields of the body, as the client sent them.
    pub params: SamplingParams,
}

impl TryFrom<Value> for Request {
    type Error = FieldError;

    fn try_from(value: Value) -> Result<Self, FieldError> {
        let object = json::object(&value, "request")?;
        let endpoint: Endpoint = json::required(object, "endpoint")?;
        let body = object.get("body").ok_or_else(|| FieldError::new("body", "missing"))?;
        Ok(Request { id: json::required(object, "id")?, endpoint, params: endpoint.sampling_params(body)? })
    }
}
