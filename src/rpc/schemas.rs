//! JSON Schemas of the protocol's types, for the OpenRPC document: the method list
//! ([`super::methods`]) names a schema function per params and result type, and
//! [`super::openrpc`] collects what they register into `#/components/schemas`.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

/// Schema generators: params are described as the daemon deserializes them, results as it
/// serializes them. Both put shared types under `#/components/schemas`.
pub struct Schemas {
    de: SchemaGenerator,
    ser: SchemaGenerator,
}

impl Schemas {
    pub fn new() -> Schemas {
        let settings = || {
            SchemaSettings::draft2020_12().with(|s| {
                s.definitions_path = "/components/schemas".into();
                s.meta_schema = None;
            })
        };
        Schemas {
            de: settings().for_deserialize().into_generator(),
            ser: settings().for_serialize().into_generator(),
        }
    }

    /// One OpenRPC content descriptor per field of the params struct `T`, as parsed.
    pub fn params<T: JsonSchema>(&mut self) -> Vec<Value> {
        descriptors(self.de.root_schema_for::<T>())
    }

    /// One OpenRPC content descriptor per member of the payload `T` (an event or a hook
    /// message), as sent.
    pub fn fields<T: JsonSchema>(&mut self) -> Vec<Value> {
        descriptors(self.ser.root_schema_for::<T>())
    }

    /// A `$ref` to a serialized result type, registering its definition.
    pub fn result<T: JsonSchema>(&mut self) -> Value {
        self.ser.subschema_for::<T>().to_value()
    }

    /// The schema of a hook reply `T` (as the daemon parses it) or `null`.
    pub fn nullable<T: JsonSchema>(&mut self) -> Value {
        json!({"oneOf": [{"type": "null"}, self.de.subschema_for::<T>().to_value()]})
    }

    /// Every generated definition, params' view first (they agree on shared types).
    pub fn definitions(&mut self) -> Map<String, Value> {
        let mut out = self.de.take_definitions(true);
        for (k, v) in self.ser.take_definitions(true) {
            out.entry(k).or_insert(v);
        }
        out
    }
}

impl Default for Schemas {
    fn default() -> Self {
        Schemas::new()
    }
}

/// The content descriptors of a struct's schema: one per property, with its description,
/// whether it is required, and its schema.
fn descriptors(root: schemars::Schema) -> Vec<Value> {
    let obj = root.as_object().cloned().unwrap_or_default();
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(Value::Object(props)) = obj.get("properties") else {
        return Vec::new();
    };
    props
        .iter()
        .map(|(name, schema)| {
            let mut schema = schema.clone();
            let description = schema.as_object_mut().and_then(|o| o.remove("description"));
            let mut d = Map::new();
            d.insert("name".into(), json!(name));
            if let Some(desc) = description {
                d.insert("description".into(), desc);
            }
            d.insert("required".into(), json!(required.contains(&name.as_str())));
            d.insert("schema".into(), schema);
            Value::Object(d)
        })
        .collect()
}
