"""Kubernetes plumbing: API client, raw JSON access, informers, work queue, leases, events."""
