"""asv suite of the softmax example."""
