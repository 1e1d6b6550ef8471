"""`POST /v1/load_lora_adapter` and `POST /v1/unload_lora_adapter`, with vLLM's bodies: LoRA adapters
loaded and unloaded while the server runs (admin keys only when keys are on). An adapter that requests
are using cannot be unloaded (400); requests of other adapters are not disturbed.

An adapter is a model of the server, as its base is: every key may use it and sees it listed, only an
admin loads or unloads it (the registry records who loaded it). Database keys get no option to load
their own: `lora_path` names a folder on the server, which a user key must not choose (it would probe
and read the server's files), and an adapter loaded by one key would be every key's model."""

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from gateway.security.tenancy import ADMIN_CALLER, Caller
from gateway.web.deps import State, require_admin_key

router = APIRouter(prefix="/v1", dependencies=[Depends(require_admin_key)])


class LoadLoRAAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    base_model_name: str | None = None  # ours: which embedded model (default: the first)


class UnloadLoRAAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None  # accepted as vLLM's body has it; the name decides


def _caller(request: Request) -> Caller:
    return getattr(request.state, "caller", ADMIN_CALLER)  # unset when the server runs without keys


@router.post("/load_lora_adapter", response_class=PlainTextResponse)
async def load_lora_adapter(body: LoadLoRAAdapter, request: Request, state: State) -> str:
    await state.models.load_lora(body.lora_name, body.lora_path, body.base_model_name, _caller(request).owner)
    return f"Success: LoRA adapter '{body.lora_name}' added successfully."


@router.post("/unload_lora_adapter", response_class=PlainTextResponse)
async def unload_lora_adapter(body: UnloadLoRAAdapter, request: Request, state: State) -> str:
    await state.models.unload_lora(body.lora_name, _caller(request).owner)
    return f"Success: LoRA adapter '{body.lora_name}' removed successfully."
