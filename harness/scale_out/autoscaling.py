"""The chart's autoscaling, evaluated outside Kubernetes: the HPA as the
chart renders it with values-hpa.yaml (metric name, target, bounds), the
prometheus-adapter rule that serves its metric (prometheus-adapter-values.yaml),
expanded as the adapter expands it for a set of pods, and the HPA's own
algorithm for the replicas it then asks for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from harness.helm import CHART, render_chart

HPA_VALUES = CHART / "values-hpa.yaml"
ADAPTER_VALUES = CHART / "prometheus-adapter-values.yaml"
AUTOSCALING_TEMPLATE = "templates/autoscaling.yaml"
# Kubernetes' default --horizontal-pod-autoscaler-tolerance.
HPA_TOLERANCE = 0.1


@dataclass(frozen=True)
class Autoscaling:
    metric: str
    target: float  # the Pods metric's AverageValue target
    min_replicas: int
    max_replicas: int
    metrics_query: str  # the adapter rule's template (<<.LabelMatchers>>, <<.GroupBy>>)

    def query(self, namespace: str, pods: Sequence[str]) -> str:
        """The PromQL prometheus-adapter runs for the metric of `pods`: their
        label matchers, grouped by pod, one series per pod."""
        matchers = f'namespace="{namespace}",pod=~"{"|".join(pods)}"'
        return self.metrics_query.replace("<<.LabelMatchers>>", matchers).replace(
            "<<.GroupBy>>", "pod"
        )

    def desired_replicas(self, current: int, per_pod: Sequence[float]) -> int:
        """Kubernetes' algorithm for a Pods metric with an AverageValue
        target: desired = ceil(current * average / target), no change while
        average / target is within the tolerance of 1, then bounded by
        minReplicas and maxReplicas. No pod with a value: no change."""
        if not per_pod:
            return current
        ratio = sum(per_pod) / len(per_pod) / self.target
        if abs(ratio - 1.0) <= HPA_TOLERANCE:
            return current
        return max(self.min_replicas, min(self.max_replicas, math.ceil(current * ratio)))


def chart_autoscaling() -> Autoscaling:
    """The HPA the chart renders with values-hpa.yaml and the adapter rule
    that serves the metric it names."""
    (hpa,) = render_chart(values_files=[HPA_VALUES], show_only=[AUTOSCALING_TEMPLATE])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["target"]["type"] == "AverageValue"
    name = metric["pods"]["metric"]["name"]
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    (rule,) = [rule for rule in rules if rule["name"]["as"] == name]
    return Autoscaling(
        metric=name,
        target=float(metric["pods"]["target"]["averageValue"]),
        min_replicas=int(hpa["spec"]["minReplicas"]),
        max_replicas=int(hpa["spec"]["maxReplicas"]),
        metrics_query=" ".join(rule["metricsQuery"].split()),
    )
