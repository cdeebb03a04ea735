"""Driving a generated flame graph page: open it, find nodes, point, click, read back."""

from __future__ import annotations

import json
from pathlib import Path

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys


class FlamePage:
    def __init__(self, driver, html: str, path: Path) -> None:
        path.write_text(html, encoding="utf-8")
        self.driver = driver
        self.url = path.resolve().as_uri()
        driver.get_log("performance")  # drop events of earlier pages
        driver.get(self.url)
        state = self.run_async("aiflame.ready.then(() => done('ok'), (e) => done(String(e)));")
        assert state == "ok", state

    # -- scripting ------------------------------------------------------------------------
    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def run_async(self, body: str, *args):
        return self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];\n" + body, *args
        )

    def find(self, name: str) -> int:
        i = self.js("return aiflame.test.find(arguments[0]);", name)
        assert i >= 0, f"no node named {name!r}"
        return i

    def rect(self, node: int, view: str = "view") -> dict | None:
        return self.js(f"return aiflame.test.rect(arguments[0], aiflame.app.{view});", node)

    def centre(self, node: int, view: str = "view") -> tuple[float, float]:
        r = self.rect(node, view)
        assert r is not None, f"node {node} is not drawn"
        return r["x"] + r["w"] / 2, r["y"] + r["h"] / 2

    def pixel(self, x: float, y: float, view: str = "view") -> list[int]:
        script = f"return aiflame.test.pixel(arguments[0], arguments[1], aiflame.app.{view});"
        return self.js(script, x, y)

    def text(self, element_id: str) -> str:
        return self.driver.find_element(By.ID, element_id).text

    def visible(self, element_id: str) -> bool:
        return self.driver.find_element(By.ID, element_id).is_displayed()

    # -- pointer and keys -----------------------------------------------------------------
    def _pointer(self) -> ActionBuilder:
        return ActionBuilder(self.driver)

    def hover(self, x: float, y: float) -> None:
        a = self._pointer()
        a.pointer_action.move_to_location(int(x), int(y))
        a.perform()

    def click_at(self, x: float, y: float) -> None:
        a = self._pointer()
        a.pointer_action.move_to_location(int(x), int(y)).click()
        a.perform()

    def right_click_at(self, x: float, y: float) -> None:
        a = self._pointer()
        a.pointer_action.move_to_location(int(x), int(y)).context_click()
        a.perform()

    def click(self, node: int, view: str = "view") -> None:
        self.click_at(*self.centre(node, view))

    def menu(self, node: int, action: str, view: str = "view") -> None:
        self.right_click_at(*self.centre(node, view))
        self.driver.find_element(By.CSS_SELECTOR, f'#menu button[data-act="{action}"]').click()

    def press(self, key: str) -> None:
        ActionChains(self.driver).send_keys(key).perform()

    def escape(self) -> None:
        self.press(Keys.ESCAPE)

    def button(self, element_id: str) -> None:
        self.driver.find_element(By.ID, element_id).click()

    def tab(self, name: str) -> None:
        self.driver.find_element(By.CSS_SELECTOR, f'.tabs button[data-tab="{name}"]').click()

    def search(self, text: str) -> None:
        box = self.driver.find_element(By.ID, "search")
        box.clear()
        box.send_keys(text + Keys.ENTER)

    # -- state ----------------------------------------------------------------------------
    def zoom(self) -> int:
        return self.js("return aiflame.app.view.zoom;")

    def crumbs(self) -> list[str]:
        return [b.text for b in self.driver.find_elements(By.CSS_SELECTOR, "#crumbs .crumb")]

    def requests(self) -> list[str]:
        """URLs the page asked the network for since it was opened."""
        return network_requests(self.driver)

    def alerts(self) -> list[str]:
        return self.js("return window.__alerts;")

    def console_errors(self) -> list[str]:
        return console_errors(self.driver)


def network_requests(driver) -> list[str]:  # type: ignore[no-untyped-def]
    """URLs a page asked the network for since the performance log was last read."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def console_errors(driver) -> list[str]:  # type: ignore[no-untyped-def]
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
