"""Nodes as cm-scale keeps them: their states and transitions, the
bootstrap a burst node runs, the inventory of on-prem nodes."""
