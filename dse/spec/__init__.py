"""Specification: validated model, system, network, NIC and price specs, and the network's equipment."""
