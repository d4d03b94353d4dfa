//! End-to-end tests on kind (see e2e/run.sh).
