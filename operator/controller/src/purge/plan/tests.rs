use k8s_openapi::jiff::Timestamp;

use super::*;

const UID: &str = "0f6c1a52-0000-4000-8000-00000000abcd";

fn purge(spec_yaml: &str) -> EdgeCachePurge {
    let doc = format!(
        "apiVersion: edgecache.dev/v1alpha1\nkind: EdgeCachePurge\nmetadata:\n  name: p\n  namespace: edge\n  uid: {UID}\n  generation: 1\n  creationTimestamp: \"2026-12-01T10:00:00Z\"\nspec:\n  edgeCache: web\n{}",
        spec_yaml
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    yaml_serde::from_str(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"))
}

fn t(secs: i64) -> Time {
    Time(Timestamp::from_second(1_700_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn pod(name: &str, uid: &str, node: &str, ip: Option<&str>, ready: bool) -> PodView {
    PodView {
        name: name.into(),
        uid: uid.into(),
        node: node.into(),
        ip: ip.and_then(|i| i.parse().ok()),
        ready,
    }
}

fn complete(st: &EdgeCachePurgeStatus) -> (&str, &str, &str) {
    let c = st.condition(condition::COMPLETE).expect("Complete is set");
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

#[test]
fn one_call_per_selector_with_a_stable_id_and_the_creation_time() {
    // 2026-12-01T10:00:00Z, to the end of that second.
    let at = "at=1796119201";
    let p = purge("tags: [product-42, \"a b&c\"]\nsoft: true\n");
    let c = calls(&p).unwrap();
    assert_eq!(
        c,
        vec![
            AdminCall {
                id: format!("{UID}-0"),
                path_and_query: format!("/purge?id={UID}-0&tag=product-42&soft&{at}"),
            },
            AdminCall {
                id: format!("{UID}-1"),
                path_and_query: format!("/purge?id={UID}-1&tag=a+b%26c&soft&{at}"),
            },
        ]
    );
    // The same object gives the same calls (re-sending is idempotent on the pod).
    assert_eq!(calls(&p).unwrap(), c);

    let c = calls(&purge("urls: [\"http://www.example/a.css?v=1\"]\n")).unwrap();
    assert_eq!(
        c[0].path_and_query,
        format!("/purge?id={UID}-0&url=http%3A%2F%2Fwww.example%2Fa.css%3Fv%3D1&{at}")
    );
    let c = calls(&purge("prefixes: [\"http://www.example/img/\"]\n")).unwrap();
    assert_eq!(
        c[0].path_and_query,
        format!("/purge?id={UID}-0&prefix=http%3A%2F%2Fwww.example%2Fimg%2F&{at}")
    );
    let c = calls(&purge("all: true\n")).unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].path_and_query, format!("/purge?id={UID}-0&all&{at}"));
    // The id fits the data plane's limit (1 to 128 of A-Z a-z 0-9 - _ .).
    assert!(c[0].id.len() <= 128);
}

#[test]
fn nothing_two_kinds_or_an_unstored_object_is_refused() {
    assert_eq!(calls(&purge("soft: true\n")), Err(PlanError::Selectors));
    assert_eq!(
        calls(&purge("tags: [x]\nurls: [\"http://a/\"]\n")),
        Err(PlanError::Selectors)
    );
    assert_eq!(
        calls(&purge("tags: [x]\nall: true\n")),
        Err(PlanError::Selectors)
    );
    let mut p = purge("all: true\n");
    p.metadata.uid = None;
    assert_eq!(calls(&p), Err(PlanError::NotStored("uid")));
    let mut p = purge("all: true\n");
    p.metadata.creation_timestamp = None;
    assert_eq!(calls(&p), Err(PlanError::NotStored("creationTimestamp")));
}

#[test]
fn pod_views_skip_pods_going_away() {
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-a", "uid": "u1"},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"podIP": "10.0.0.7", "phase": "Running",
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    assert_eq!(
        pod_view(&p),
        Some(pod("web-a", "u1", "n1", Some("10.0.0.7"), true))
    );
    let mut not_ready = p.clone();
    if let Some(s) = not_ready.status.as_mut() {
        s.conditions = Some(vec![Default::default()]);
        s.pod_ip = None;
    }
    assert_eq!(
        pod_view(&not_ready),
        Some(pod("web-a", "u1", "n1", None, false))
    );
    let mut deleting = p.clone();
    deleting.metadata.deletion_timestamp = Some(t(0));
    assert_eq!(pod_view(&deleting), None);
    let mut failed = p;
    if let Some(s) = failed.status.as_mut() {
        s.phase = Some("Failed".into());
    }
    assert_eq!(pod_view(&failed), None);
}

#[test]
fn answers() {
    let call = AdminCall {
        id: "u-0".into(),
        path_and_query: "/purge?id=u-0&all".into(),
    };
    let ok =
        br#"{"id":"u-0","rules":1,"objects":3,"repeated":false,"node":"n1","rules_in_force":1}"#;
    assert_eq!(
        read_answer(&call, 200, ok),
        Ok(Answer {
            id: "u-0".into(),
            node: "n1".into(),
            objects: 3,
            repeated: false,
        })
    );
    let err = read_answer(
        &call,
        401,
        b"unauthorized: this call needs `Authorization: Bearer <admin token>`\n",
    )
    .unwrap_err();
    assert_eq!(err.cause, Cause::Refused);
    assert!(
        err.why.contains("refused the admin token (HTTP 401"),
        "{err:?}"
    );
    let err = read_answer(&call, 400, b"bad purge: id: 1 to 128\n").unwrap_err();
    assert_eq!(
        err,
        Failure::new(
            Cause::BadAnswer,
            "the pod answered HTTP 400: bad purge: id: 1 to 128"
        )
    );
    assert_eq!(
        read_answer(&call, 200, b"ok\n").map_err(|f| f.cause),
        Err(Cause::BadAnswer)
    );
    let other = br#"{"id":"u-1","objects":0,"node":"n1"}"#;
    assert!(
        read_answer(&call, 200, other)
            .unwrap_err()
            .why
            .contains("u-1")
    );
}

#[test]
fn only_ready_unconfirmed_pods_with_an_ip_are_sent_to() {
    let pods = [
        pod("a", "ua", "n1", Some("10.0.0.1"), true),
        pod("b", "ub", "n2", Some("10.0.0.2"), false),
        pod("c", "uc", "n3", None, true),
        pod("d", "ud2", "n4", Some("10.0.0.4"), true),
        pod("e", "ue", "n5", Some("10.0.0.5"), true),
    ];
    let st = EdgeCachePurgeStatus {
        nodes: vec![
            // d was confirmed under an older uid: the new pod gets the purge again.
            PurgeNodeStatus {
                pod: "d".into(),
                pod_uid: "ud1".into(),
                ..Default::default()
            },
            PurgeNodeStatus {
                pod: "e".into(),
                pod_uid: "ue".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let names: Vec<&str> = to_send(&pods, Some(&st))
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["a", "d"]);
}

#[test]
fn complete_when_every_current_pod_confirmed_and_not_after_a_new_pod() {
    let mut p = purge("tags: [x]\n");
    let pods = vec![
        pod("web-a", "ua", "n1", Some("10.0.0.1"), true),
        pod("web-b", "ub", "n2", Some("10.0.0.2"), true),
        pod("web-c", "uc", "n3", Some("10.0.0.3"), true),
    ];
    let deliveries: BTreeMap<String, Delivery> = [
        (
            "ua".to_string(),
            Delivery::Confirmed {
                node: "n1".into(),
                objects: 2,
            },
        ),
        (
            "ub".to_string(),
            Delivery::Confirmed {
                node: String::new(),
                objects: 0,
            },
        ),
        (
            "uc".to_string(),
            Delivery::Failed(Failure::new(Cause::Unreachable, "unreachable")),
        ),
    ]
    .into();
    let st = compute(&p, &pods, &deliveries, None, &t(0));
    assert_eq!(st.confirmed, "2/3");
    assert_eq!(st.kind, "tags");
    assert_eq!(st.observed_generation, Some(1));
    assert_eq!(
        st.nodes,
        vec![
            PurgeNodeStatus {
                pod: "web-a".into(),
                pod_uid: "ua".into(),
                node: "n1".into(),
                confirmed_at: "2023-11-14T22:13:20Z".into(),
                objects: 2,
            },
            // No node name reported: the pod's spec.nodeName.
            PurgeNodeStatus {
                pod: "web-b".into(),
                pod_uid: "ub".into(),
                node: "n2".into(),
                confirmed_at: "2023-11-14T22:13:20Z".into(),
                objects: 0,
            },
        ]
    );
    assert_eq!(
        st.pending,
        vec![PurgePendingStatus {
            pod: "web-c".into(),
            node: "n3".into(),
            reason: "unreachable".into(),
        }]
    );
    let (s, reason, msg) = complete(&st);
    assert_eq!((s, reason), ("False", "AdminUnreachable"));
    assert_eq!(
        msg,
        "2/3 pod(s) confirmed; waiting for node n3 (pod web-c): unreachable; the operator cannot \
         reach the admin port of some pods (check NetworkPolicies and node firewalls for \
         spec.network.adminPort)"
    );

    // Next round: only web-c was sent to; the earlier confirmations are kept as they were.
    p.status = Some(st);
    let deliveries: BTreeMap<String, Delivery> = [(
        "uc".to_string(),
        Delivery::Confirmed {
            node: "n3".into(),
            objects: 1,
        },
    )]
    .into();
    let st = compute(&p, &pods, &deliveries, None, &t(10));
    assert_eq!(st.confirmed, "3/3");
    assert!(st.pending.is_empty());
    assert_eq!(st.nodes[0].confirmed_at, "2023-11-14T22:13:20Z");
    assert_eq!(st.nodes[2].confirmed_at, "2023-11-14T22:13:30Z");
    assert_eq!(complete(&st).0, "True");
    assert!(is_complete(&st));
    let since = st.conditions[0].last_transition_time.clone();
    assert_eq!(since, t(10));

    // Nothing new: the same status, transition time kept.
    p.status = Some(st.clone());
    assert_eq!(compute(&p, &pods, &BTreeMap::new(), None, &t(20)), st);

    // A pod added later: Complete turns false until it confirms; a pod that went away drops out.
    let mut later = pods.clone();
    later.remove(0);
    later.push(pod("web-d", "ud", "n4", Some("10.0.0.4"), false));
    let st = compute(&p, &later, &BTreeMap::new(), None, &t(30));
    assert_eq!(st.confirmed, "2/3");
    assert_eq!(
        st.nodes.iter().map(|n| n.pod.as_str()).collect::<Vec<_>>(),
        ["web-b", "web-c"]
    );
    assert_eq!(st.pending[0].reason, "the pod is not ready");
    let (s, reason, msg) = complete(&st);
    assert_eq!((s, reason), ("False", "PodsPending"));
    assert!(msg.contains("node n4 (pod web-d)"), "{msg}");
    assert_eq!(st.conditions[0].last_transition_time, t(30));
}

#[test]
fn no_pods_or_blocked_is_not_complete_and_says_why() {
    let p = purge("all: true\n");
    let st = compute(&p, &[], &BTreeMap::new(), None, &t(0));
    assert_eq!(st.confirmed, "0/0");
    assert_eq!(complete(&st).1, "NoPods");
    assert_eq!(complete(&st).0, "False");

    let pods = [pod("web-a", "ua", "n1", Some("10.0.0.1"), true)];
    let blocked = Blocked {
        reason: "NoAdminToken",
        message: "Secret edge/web-admin-token has no token",
    };
    let st = compute(&p, &pods, &BTreeMap::new(), Some(blocked), &t(0));
    assert_eq!(
        complete(&st),
        (
            "False",
            "NoAdminToken",
            "Secret edge/web-admin-token has no token"
        )
    );
    assert_eq!(st.pending[0].reason, blocked.message);
    assert!(!is_complete(&st));

    // The EdgeCache is gone: no pods, and the reason says why.
    let gone = Blocked {
        reason: "EdgeCacheNotFound",
        message: "EdgeCache edge/web does not exist",
    };
    let st = compute(&p, &[], &BTreeMap::new(), Some(gone), &t(0));
    assert_eq!(
        complete(&st),
        (
            "False",
            "EdgeCacheNotFound",
            "EdgeCache edge/web does not exist"
        )
    );
}

#[test]
fn long_pending_lists_are_cut_short_in_the_message() {
    let p = purge("all: true\n");
    let pods: Vec<PodView> = (0..8)
        .map(|i| {
            pod(
                &format!("web-{i}"),
                &format!("u{i}"),
                &format!("n{i}"),
                None,
                false,
            )
        })
        .collect();
    let st = compute(&p, &pods, &BTreeMap::new(), None, &t(0));
    let msg = complete(&st).2;
    assert!(msg.starts_with("0/8 pod(s) confirmed; waiting for node n0 (pod web-0)"));
    assert!(msg.ends_with("; and 3 more"), "{msg}");
    assert_eq!(st.pending.len(), 8);
}

#[test]
fn a_pod_event_needs_only_the_purges_it_can_change() {
    let p = purge("tags: [x]\n");
    let pod_of = |name: &str, uid: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": uid},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"podIP": "10.0.0.7", "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    };
    let views = vec![pod("web-a", "ua", "n1", Some("10.0.0.1"), true)];
    let confirmed: BTreeMap<String, Delivery> = [(
        "ua".to_string(),
        Delivery::Confirmed {
            node: "n1".into(),
            objects: 0,
        },
    )]
    .into();
    let done = compute(&p, &views, &confirmed, None, &t(0));
    assert!(is_complete(&done));
    // Complete: the confirmed pod's events need nothing; a new or replaced pod needs it.
    assert!(!needs_pod(Some(&done), &pod_of("web-a", "ua")));
    assert!(needs_pod(Some(&done), &pod_of("web-a", "ua-2")));
    assert!(needs_pod(Some(&done), &pod_of("web-b", "ub")));
    let mut going = pod_of("web-b", "ub");
    going.metadata.deletion_timestamp = Some(t(1));
    assert!(!needs_pod(Some(&done), &going));
    // Not complete (or never written): every pod's event may change it.
    let pending = compute(&p, &views, &BTreeMap::new(), None, &t(0));
    assert!(!is_complete(&pending));
    assert!(needs_pod(Some(&pending), &pod_of("web-a", "ua")));
    assert!(needs_pod(None, &pod_of("web-a", "ua")));
}
