"""Benchmarks: each prints numbers (and the machine they were taken on); none is a timed test."""
