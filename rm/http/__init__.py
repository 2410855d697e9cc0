"""The RM's HTTP face: the dashboard, a JSON API and Prometheus metrics, served on the RM's own
event loop (server.py), from views of the RM's state (api.py), the cluster's event records as they
are written (watch.py) and the metrics they fold into (metrics.py)."""
from .server import dashboard_lines, dashboard_url, is_loopback, make_app, start_http

__all__ = ["dashboard_lines", "dashboard_url", "is_loopback", "make_app", "start_http"]
