// Package testenv finds the real services that integration and end-to-end
// tests run against (PostgreSQL, Redis, Kafka) and the speculapro binary they
// drive. A test whose service does not answer is skipped with a loud message
// naming the service and the command that starts it; `make test` starts every
// service first, so under `make test` nothing skips (SP_TEST_REQUIRE_SERVICES=1
// turns a skip into a failure there).
package testenv
