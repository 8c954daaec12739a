"""A real Prometheus beside the local cluster (scraping, rules, alerts)."""
