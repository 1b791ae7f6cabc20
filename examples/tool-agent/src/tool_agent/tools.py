"""The agent's tools: small and deterministic, so what the model did is easy to see."""

from __future__ import annotations

from langchain_core.tools import BaseTool, tool

# A made-up forecast: the point is the tool round trip, not the weather.
_FORECAST = {"paris": "sunny, 21 °C", "oslo": "snowing, -3 °C", "lima": "cloudy, 18 °C"}


@tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: {_FORECAST.get(city.strip().lower(), 'no forecast, 15 °C')}"


@tool
def add(a: float, b: float) -> float:
    """The sum of two numbers."""
    return a + b


TOOLS: list[BaseTool] = [get_weather, add]
