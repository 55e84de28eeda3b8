"""The web dashboard: ``pyrmq dashboard --namesrv ...`` and the page ``pyrmq dev`` serves beside its roles.

Pages rendered on the server (Starlette on hypercorn's trio worker) from what the brokers answer through
:mod:`pyrmq.client.admin`; charts are inline SVG drawn from figures the dashboard samples itself. See
docs/dashboard.md.
"""
