"""Classification: detector events -> incidents of one taxonomy, with evidence in words."""
