"""The Helm chart's data plane run for real on this machine: replicas in
CPU-quota cgroups behind Envoy, scraped by Prometheus (cluster.py), load
through it (load.py), the chart's autoscaling evaluated against it
(autoscaling.py), the scenarios with their bounds (scenarios.py), and two
tenants on replicas that run their edges (tenants.py)."""
