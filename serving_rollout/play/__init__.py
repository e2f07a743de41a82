"""Code only the controller runs inside a play: the one base of every action plugin (actions.py), the host steps
an action runs (host_steps.py), and the pure logic only actions use (the A/B arm, its statistics, the KV
capacity). Nothing here ships to a host; docs/architecture.md gives the rule."""
