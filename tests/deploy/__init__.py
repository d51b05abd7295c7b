"""Tests of gpudra's deployment: Kustomize overlays, NATS configuration, examples.

Helpers: `kubectl` (a kubectl with kustomize, from a PyPI wheel), `manifests` (paths, rendered
objects, schema validation), `nats_subjects` (NATS subject matching for permission checks).
"""
