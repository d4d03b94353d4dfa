//! The `EdgeCache` custom resource (edgecache.dev/v1alpha1).
