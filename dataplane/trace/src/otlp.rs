//! The OTLP trace export request, encoded as protobuf by hand: the few messages and fields of
//! opentelemetry/proto/collector/trace/v1/trace_service.proto and trace/v1/trace.proto that
//! EdgeCache's spans use, field numbers as those files give them. Checked against the
//! OpenTelemetry project's generated types (the tests below, and every test that reads spans
//! back through src/receiver.rs).

use crate::span::{SpanData, Value};

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire));
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A nested message: written to `scratch` first, for its length.
fn message(out: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    write(&mut inner);
    bytes(out, field, &inner);
}

/// `KeyValue { string key = 1; AnyValue value = 2; }`, `AnyValue { oneof { string
/// string_value = 1; bool bool_value = 2; int64 int_value = 3; } }`
fn key_value(out: &mut Vec<u8>, field: u32, k: &str, v: &Value) {
    message(out, field, |kv| {
        bytes(kv, 1, k.as_bytes());
        message(kv, 2, |any| match v {
            Value::Str(s) => bytes(any, 1, s.as_bytes()),
            Value::Bool(b) => {
                key(any, 2, VARINT);
                varint(any, u64::from(*b));
            }
            Value::Int(i) => {
                key(any, 3, VARINT);
                varint(any, *i as u64);
            }
        });
    });
}

/// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }` of one resource
/// and one scope (`edgecache`).
pub fn encode(resource: &[(String, String)], spans: &[SpanData]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 * spans.len() + 256);
    // ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
    message(&mut out, 1, |rs| {
        // Resource { repeated KeyValue attributes = 1; }
        message(rs, 1, |r| {
            for (k, v) in resource {
                key_value(r, 1, k, &Value::Str(v.clone().into()));
            }
        });
        // ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }
        message(rs, 2, |ss| {
            // InstrumentationScope { string name = 1; string version = 2; }
            message(ss, 1, |scope| {
                bytes(scope, 1, b"edgecache");
                bytes(scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
            });
            for s in spans {
                message(ss, 2, |m| span(m, s));
            }
        });
    });
    out
}

/// `Span { bytes trace_id = 1; bytes span_id = 2; bytes parent_span_id = 4; string name = 5;
/// SpanKind kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
/// repeated KeyValue attributes = 9; Status status = 15; fixed32 flags = 16; }`
fn span(out: &mut Vec<u8>, s: &SpanData) {
    bytes(out, 1, &s.trace_id);
    bytes(out, 2, &s.span_id);
    if let Some(p) = &s.parent {
        bytes(out, 4, p);
    }
    bytes(out, 5, s.name.as_bytes());
    key(out, 6, VARINT);
    varint(out, s.kind as u64);
    key(out, 7, FIXED64);
    out.extend_from_slice(&s.start.to_le_bytes());
    key(out, 8, FIXED64);
    out.extend_from_slice(&s.end.to_le_bytes());
    for (k, v) in &s.attributes {
        key_value(out, 9, k, v);
    }
    // Status { string message = 2; StatusCode code = 3; } (2: error); unset otherwise.
    if let Some(msg) = &s.error {
        message(out, 15, |st| {
            bytes(st, 2, msg.as_bytes());
            key(st, 3, VARINT);
            varint(st, 2);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::span::Kind;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use prost::Message;

    #[test]
    fn the_otel_types_decode_it() {
        let spans = vec![SpanData {
            trace_id: [7; 16],
            span_id: [8; 8],
            parent: Some([9; 8]),
            name: "GET".into(),
            kind: Kind::Server,
            start: 1_700_000_000_000_000_000,
            end: 1_700_000_000_500_000_000,
            attributes: vec![
                ("edgecache.cache", "hit".into()),
                ("http.response.status_code", 200i64.into()),
                ("negative", (-5i64).into()),
                ("edgecache.completed", true.into()),
            ],
            error: Some("boom".into()),
        }];
        let bytes = encode(&[("service.name".into(), "edgecache".into())], &spans);
        let req = ExportTraceServiceRequest::decode(&bytes[..]).expect("decodes");
        let rs = &req.resource_spans[0];
        let res = rs.resource.as_ref().expect("resource");
        assert_eq!(res.attributes[0].key, "service.name");
        let ss = &rs.scope_spans[0];
        assert_eq!(
            ss.scope.as_ref().map(|s| s.name.as_str()),
            Some("edgecache")
        );
        let s = &ss.spans[0];
        assert_eq!(s.trace_id, vec![7; 16]);
        assert_eq!(s.span_id, vec![8; 8]);
        assert_eq!(s.parent_span_id, vec![9; 8]);
        assert_eq!(s.name, "GET");
        assert_eq!(s.kind, 2);
        assert_eq!(s.start_time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(s.end_time_unix_nano, 1_700_000_000_500_000_000);
        let values: Vec<_> = s
            .attributes
            .iter()
            .map(|kv| {
                (
                    kv.key.as_str(),
                    kv.value.as_ref().and_then(|v| v.value.clone()),
                )
            })
            .collect();
        assert_eq!(
            values,
            vec![
                (
                    "edgecache.cache",
                    Some(any_value::Value::StringValue("hit".into()))
                ),
                (
                    "http.response.status_code",
                    Some(any_value::Value::IntValue(200))
                ),
                ("negative", Some(any_value::Value::IntValue(-5))),
                (
                    "edgecache.completed",
                    Some(any_value::Value::BoolValue(true))
                ),
            ]
        );
        let st = s.status.as_ref().expect("status");
        assert_eq!((st.code, st.message.as_str()), (2, "boom"));
    }
}
