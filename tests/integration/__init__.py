"""The integration tier; also the operator harness the guest tier, the node tier and the bench reuse."""
