//! `#[derive(Module)]`: implements `radix::Module` for a struct by visiting
//! its fields in declaration order, each under its name (tuple structs: its
//! index), and generates the struct's twin with other leaves
//! (`radix::Bufferized<T>`, `radix::Shapes<T>`), named `<T>With<L>`.
//!
//! Field attributes:
//! - `#[module(rename = "attn_q")]`: the field's path segment (a checkpoint
//!   name that differs from the field's);
//! - `#[module(prefix = "ffn_")]`: the field adds no segment of its own but
//!   glues `ffn_` to its fields' names (`ffn_gate`, `ffn_up`);
//! - `#[module(skip)]`: not visited; the twin holds a clone.
//!
//! Fields of plain types (numbers, `String`, ...) visit nothing by
//! themselves. On an enum, the derive makes a plain value: it holds no
//! tensor, and is the same with any leaves.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, Ident, Index, LitStr, parse_macro_input};

/// Derives `radix::Module` for a struct (see the crate docs).
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// How a field sits in the path.
enum Naming {
    /// Under this segment.
    Field(String),
    /// Glued: the prefix joins its fields' first segment.
    Prefix(String),
    /// Not visited.
    Skip,
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let data = match &input.data {
        Data::Struct(data) => data,
        Data::Enum(_) => return Ok(plain(input)),
        Data::Union(_) => {
            return Err(syn::Error::new_spanned(
                &input.ident,
                "#[derive(Module)] supports structs and enums only",
            ));
        }
    };
    let fields: Vec<_> = match &data.fields {
        Fields::Named(f) => f.named.iter().collect(),
        Fields::Unnamed(f) => f.unnamed.iter().collect(),
        Fields::Unit => vec![],
    };
    let mut namings = vec![];
    for (i, field) in fields.iter().enumerate() {
        let default = field
            .ident
            .as_ref()
            .map_or_else(|| i.to_string(), Ident::to_string);
        namings.push(naming(field, default)?);
    }
    if namings.iter().all(|n| matches!(n, Naming::Skip)) {
        return Ok(plain(input));
    }

    let ident = &input.ident;
    let vis = &input.vis;
    let twin = format_ident!("{}With", ident);
    let leaf = Ident::new("__L", Span::call_site());
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    let params = &input.generics.params;
    let twin_params = if params.is_empty() {
        quote!(#leaf)
    } else {
        quote!(#leaf, #params)
    };
    let twin_args = {
        let args = input.generics.params.iter().map(|p| match p {
            syn::GenericParam::Type(t) => {
                let id = &t.ident;
                quote!(#id)
            }
            syn::GenericParam::Lifetime(l) => {
                let lt = &l.lifetime;
                quote!(#lt)
            }
            syn::GenericParam::Const(c) => {
                let id = &c.ident;
                quote!(#id)
            }
        });
        quote!(#(#args,)*)
    };
    let twin_of = |l: Tokens| quote!(#twin<#l, #twin_args>);

    let mut visits = vec![];
    let mut visits_mut = vec![];
    let mut maps = vec![];
    let mut leaves = vec![];
    let mut twin_fields = vec![];
    let mut twin_types = vec![];
    for (i, (field, naming)) in fields.iter().zip(&namings).enumerate() {
        let ty = &field.ty;
        let fvis = &field.vis;
        let (access, binding) = match &field.ident {
            Some(id) => (quote!(#id), id.clone()),
            None => {
                let idx = Index::from(i);
                (quote!(#idx), format_ident!("__f{}", i))
            }
        };
        let twin_ty = match naming {
            Naming::Skip => quote!(#ty),
            _ => quote!(<#ty as ::radix::Module>::With<#leaf>),
        };
        twin_types.push(twin_ty.clone());
        // The twin's fields keep the struct's field docs.
        let docs = field.attrs.iter().filter(|a| a.path().is_ident("doc"));
        twin_fields.push(match &field.ident {
            Some(id) => quote!(#(#docs)* #fvis #id: #twin_ty),
            None => quote!(#(#docs)* #fvis #twin_ty),
        });
        let enter = |body: Tokens| match naming {
            Naming::Field(name) => quote!(::radix::module::with_field(path, #name, |p| #body)),
            Naming::Prefix(prefix) => {
                quote!(::radix::module::with_prefix(path, #prefix, |p| #body))
            }
            Naming::Skip => quote!(()),
        };
        if let Naming::Skip = naming {
            maps.push(quote!(let #binding = ::std::clone::Clone::clone(&self.#access);));
            continue;
        }
        let v = enter(quote!(::radix::Module::visit(&self.#access, p, f)));
        visits.push(quote!(#v;));
        let v = enter(quote!(::radix::Module::visit_mut(&mut self.#access, p, f)));
        visits_mut.push(quote!(#v;));
        let v = enter(quote!(::radix::Module::map(&self.#access, p, f)));
        maps.push(quote!(let #binding = #v?;));
        let v = enter(quote!(<#ty as ::radix::Module>::visit_leaves(&tree.#access, p, f)));
        leaves.push(quote!(#v;));
    }
    let bindings: Vec<_> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| match &f.ident {
            Some(id) => quote!(#id),
            None => {
                let b = format_ident!("__f{}", i);
                quote!(#b)
            }
        })
        .collect();
    let (twin_body, build) = match &data.fields {
        Fields::Named(_) => (
            quote!({ #(#twin_fields,)* }),
            quote!(#twin { #(#bindings,)* }),
        ),
        _ => (quote!((#(#twin_fields,)*);), quote!(#twin(#(#bindings,)*))),
    };
    let with_leaf = twin_of(quote!(#leaf));
    let where_preds = where_g.map(|w| &w.predicates);
    let doc = format!(
        "[`{ident}`] with other leaves in place of its tensors: `radix::Bufferized<{ident}>` \
         holds its buffers, `radix::Shapes<{ident}>` its shapes (made by `#[derive(Module)]`)."
    );
    let clone_fields = bindings.iter().zip(&fields).enumerate().map(|(i, (b, f))| {
        let access = match &f.ident {
            Some(id) => quote!(#id),
            None => {
                let idx = Index::from(i);
                quote!(#idx)
            }
        };
        quote!(let #b = ::std::clone::Clone::clone(&self.#access);)
    });
    let debug_fields = fields.iter().enumerate().map(|(i, f)| match &f.ident {
        Some(id) => {
            let name = id.to_string();
            quote!(.field(#name, &self.#id))
        }
        None => {
            let idx = Index::from(i);
            let name = i.to_string();
            quote!(.field(#name, &self.#idx))
        }
    });
    let twin_name = twin.to_string();
    Ok(quote! {
        #[doc = #doc]
        #vis struct #twin<#twin_params> #where_g #twin_body

        impl<#twin_params> ::std::clone::Clone for #with_leaf
        where #(#twin_types: ::std::clone::Clone,)* #where_preds
        {
            fn clone(&self) -> Self {
                #(#clone_fields)*
                #build
            }
        }

        impl<#twin_params> ::std::fmt::Debug for #with_leaf
        where #(#twin_types: ::std::fmt::Debug,)* #where_preds
        {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(#twin_name)#(#debug_fields)*.finish()
            }
        }

        impl #impl_g ::radix::Module for #ident #ty_g #where_g {
            type With<#leaf> = #with_leaf;
            fn visit(&self, path: &mut ::std::string::String, f: &mut dyn FnMut(&str, &::radix::Tensor)) {
                #(#visits)*
            }
            fn visit_mut(&mut self, path: &mut ::std::string::String, f: &mut dyn FnMut(&str, &mut ::radix::Tensor)) {
                #(#visits_mut)*
            }
            fn map<#leaf, __E>(
                &self,
                path: &mut ::std::string::String,
                f: &mut dyn FnMut(&str, &::radix::Tensor) -> ::std::result::Result<#leaf, __E>,
            ) -> ::std::result::Result<Self::With<#leaf>, __E> {
                #(#maps)*
                Ok(#build)
            }
            fn visit_leaves<'__a, #leaf>(
                tree: &'__a Self::With<#leaf>,
                path: &mut ::std::string::String,
                f: &mut dyn FnMut(&str, &'__a #leaf),
            ) {
                #(#leaves)*
            }
        }
    })
}

/// `Module` for a value that holds no tensor: it is its own twin.
fn plain(input: &DeriveInput) -> Tokens {
    let ident = &input.ident;
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    quote! {
        impl #impl_g ::radix::Module for #ident #ty_g #where_g {
            type With<__L> = Self;
            fn visit(&self, _: &mut ::std::string::String, _: &mut dyn FnMut(&str, &::radix::Tensor)) {}
            fn visit_mut(&mut self, _: &mut ::std::string::String, _: &mut dyn FnMut(&str, &mut ::radix::Tensor)) {}
            fn map<__L, __E>(
                &self,
                _: &mut ::std::string::String,
                _: &mut dyn FnMut(&str, &::radix::Tensor) -> ::std::result::Result<__L, __E>,
            ) -> ::std::result::Result<Self, __E> {
                Ok(::std::clone::Clone::clone(self))
            }
            fn visit_leaves<'__a, __L>(
                _: &'__a Self,
                _: &mut ::std::string::String,
                _: &mut dyn FnMut(&str, &'__a __L),
            ) {}
        }
    }
}

fn naming(field: &syn::Field, default: String) -> syn::Result<Naming> {
    let mut res = Naming::Field(default);
    for attr in &field.attrs {
        if attr.path().is_ident("module") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("skip") {
                    res = Naming::Skip;
                    Ok(())
                } else if meta.path.is_ident("rename") {
                    let name: LitStr = meta.value()?.parse()?;
                    res = Naming::Field(name.value());
                    Ok(())
                } else if meta.path.is_ident("prefix") {
                    let prefix: LitStr = meta.value()?.parse()?;
                    res = Naming::Prefix(prefix.value());
                    Ok(())
                } else {
                    Err(meta.error("expected `skip`, `rename = \"..\"` or `prefix = \"..\"`"))
                }
            })?;
        }
    }
    Ok(res)
}
