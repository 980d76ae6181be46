#!/usr/bin/env python3
"""Parses Prometheus text from stdin with the reference parser (prometheus_client) and prints
{"name{label=value,...}": value} as JSON, one entry per sample, labels sorted."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

samples = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
        samples[f"{sample.name}{{{labels}}}"] = sample.value
print(json.dumps(samples))
